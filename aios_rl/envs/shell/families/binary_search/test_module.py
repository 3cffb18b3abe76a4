import unittest

from __tpl_module__ import count_between, first_true, __tpl_index_of__, isqrt, __tpl_left__, nearest, __tpl_right__

DATA = [1, 3, 3, 3, 7, 9, 12]


class SearchTest(unittest.TestCase):
    def test_left(self):
        self.assertEqual(__tpl_left__(DATA, 3), 1)
        self.assertEqual(__tpl_left__(DATA, 0), 0)
        self.assertEqual(__tpl_left__(DATA, 4), 4)
        self.assertEqual(__tpl_left__(DATA, 12), 6)
        self.assertEqual(__tpl_left__(DATA, 13), 7)
        self.assertEqual(__tpl_left__([], 5), 0)
        self.assertEqual(__tpl_left__(DATA, 3, lo=2), 2)
        self.assertEqual(__tpl_left__(DATA, 9, 0, 3), 3)

    def test_right(self):
        self.assertEqual(__tpl_right__(DATA, 3), 4)
        self.assertEqual(__tpl_right__(DATA, 0), 0)
        self.assertEqual(__tpl_right__(DATA, 12), 7)
        self.assertEqual(__tpl_right__(DATA, 8), 5)
        self.assertEqual(__tpl_right__(DATA, 1, 0, 1), 1)
        self.assertEqual(__tpl_right__(DATA, 3, hi=2), 2)

    def test_index_of(self):
        self.assertEqual(__tpl_index_of__(DATA, 3), 1)
        self.assertEqual(__tpl_index_of__(DATA, 12), 6)
        self.assertEqual(__tpl_index_of__(DATA, 1), 0)
        self.assertEqual(__tpl_index_of__(DATA, 5), -1)
        self.assertEqual(__tpl_index_of__(DATA, 13), -1)
        self.assertEqual(__tpl_index_of__([], 1), -1)

    def test_count_between(self):
        self.assertEqual(count_between(DATA, 3, 3), 3)
        self.assertEqual(count_between(DATA, 2, 9), 5)
        self.assertEqual(count_between(DATA, 0, 100), 7)
        self.assertEqual(count_between(DATA, 10, 11), 0)
        self.assertEqual(count_between(DATA, 9, 3), 0)

    def test_first_true(self):
        self.assertEqual(first_true(0, 100, lambda n: n >= 37), 37)
        self.assertEqual(first_true(0, 10, lambda n: False), 10)
        self.assertEqual(first_true(5, 10, lambda n: True), 5)
        self.assertEqual(first_true(3, 3, lambda n: True), 3)

    def test_isqrt(self):
        for n, r in [(0, 0), (1, 1), (3, 1), (4, 2), (15, 3), (16, 4), (17, 4), (99, 9), (100, 10)]:
            self.assertEqual(isqrt(n), r, n)
        with self.assertRaises(ValueError):
            isqrt(-4)

    def test_nearest(self):
        self.assertEqual(nearest(DATA, 5), 3)
        self.assertEqual(nearest(DATA, 6), 7)
        self.assertEqual(nearest(DATA, 8), 7)
        self.assertEqual(nearest(DATA, -10), 1)
        self.assertEqual(nearest(DATA, 50), 12)
        self.assertEqual(nearest(DATA, 10), 9)
        self.assertEqual(nearest(DATA, 11), 12)
        self.assertEqual(nearest([], 3), __tpl_default__)
        self.assertEqual(nearest([], 3, default=None), None)


if __name__ == "__main__":
    unittest.main()
