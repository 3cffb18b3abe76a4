import unittest

from __tpl_module__ import __tpl_cls__ as I, __tpl_merge__, total_length


class __tpl_cls__Test(unittest.TestCase):
    def test_construct(self):
        self.assertEqual(I(1, 3).lo, 1)
        self.assertEqual(I(1, 3).hi, 3)
        self.assertEqual(I(2, 2).length(), 0)
        with self.assertRaises(ValueError):
            I(3, 1)

    def test_equality_and_repr(self):
        self.assertEqual(I(1, 2), I(1, 2))
        self.assertNotEqual(I(1, 2), I(1, 3))
        self.assertNotEqual(I(1, 2), I(0, 2))
        self.assertNotEqual(I(1, 2), (1, 2))
        self.assertEqual(repr(I(1, 2)), "__tpl_cls__(1, 2)")

    def test_length_and_contains(self):
        self.assertEqual(I(-2, 5).length(), 7)
        self.assertTrue(I(0, 10).contains(0))
        self.assertTrue(I(0, 10).contains(10))
        self.assertTrue(I(0, 10).contains(4))
        self.assertFalse(I(0, 10).contains(11))
        self.assertFalse(I(0, 10).contains(-1))

    def test_overlaps(self):
        self.assertTrue(I(0, 5).overlaps(I(5, 8)))
        self.assertTrue(I(5, 8).overlaps(I(0, 5)))
        self.assertTrue(I(0, 10).overlaps(I(2, 3)))
        self.assertFalse(I(0, 4).overlaps(I(5, 8)))
        self.assertFalse(I(6, 8).overlaps(I(0, 5)))

    def test_intersection(self):
        self.assertEqual(I(0, 5).intersection(I(3, 9)), I(3, 5))
        self.assertEqual(I(3, 9).intersection(I(0, 5)), I(3, 5))
        self.assertEqual(I(0, 5).intersection(I(5, 9)), I(5, 5))
        self.assertIsNone(I(0, 1).intersection(I(2, 3)))

    def test_hull(self):
        self.assertEqual(I(0, 1).hull(I(4, 6)), I(0, 6))
        self.assertEqual(I(4, 6).hull(I(0, 1)), I(0, 6))

    def test_arithmetic(self):
        self.assertEqual(I(1, 2) + I(10, 20), I(11, 22))
        self.assertEqual(I(1, 2) - I(10, 20), I(-19, -8))
        self.assertEqual(I(1, 2) * I(3, 4), I(3, 8))
        self.assertEqual(I(-1, 2) * I(3, 4), I(-4, 8))
        self.assertEqual(I(-3, -2) * I(-5, 4), I(-12, 15))

    def test_widen(self):
        self.assertEqual(I(0, 1).widen(2), I(-2, 3))
        self.assertEqual(I(10, 20).widen(), I(10 - __tpl_margin__, 20 + __tpl_margin__))

    def test_merge(self):
        merged = __tpl_merge__([I(5, 7), I(1, 3), I(2, 4), I(8, 9)])
        self.assertEqual(merged, [I(1, 4), I(5, 7), I(8, 9)])
        self.assertEqual(__tpl_merge__([I(1, 3), I(3, 5)]), [I(1, 5)])
        self.assertEqual(__tpl_merge__([I(1, 10), I(2, 3)]), [I(1, 10)])
        self.assertEqual(__tpl_merge__([]), [])

    def test_merge_with_gap(self):
        self.assertEqual(__tpl_merge__([I(1, 2), I(4, 5)], gap=2), [I(1, 5)])
        self.assertEqual(__tpl_merge__([I(1, 2), I(4, 5)], gap=1), [I(1, 2), I(4, 5)])

    def test_total_length(self):
        self.assertEqual(total_length([I(0, 2), I(1, 4), I(10, 11)]), 5)
        self.assertEqual(total_length([]), 0)


if __name__ == "__main__":
    unittest.main()
