import unittest

from __tpl_module__ import __tpl_cls__, __tpl_cls__Error


class __tpl_cls__Test(unittest.TestCase):
    def test_new_stack_is_empty(self):
        s = __tpl_cls__()
        self.assertTrue(s.is_empty())
        self.assertFalse(s.is_full())
        self.assertEqual(len(s), 0)
        self.assertEqual(s.capacity, __tpl_cap__)
        self.assertEqual(s.free(), __tpl_cap__)

    def test_capacity_must_be_positive(self):
        with self.assertRaises(__tpl_cls__Error):
            __tpl_cls__(0)
        self.assertEqual(__tpl_cls__(1).capacity, 1)

    def test_push_returns_size(self):
        s = __tpl_cls__(5)
        self.assertEqual(s.__tpl_push__("a"), 1)
        self.assertEqual(s.__tpl_push__("b"), 2)
        self.assertFalse(s.is_empty())
        self.assertEqual(s.free(), 3)

    def test_last_in_first_out(self):
        s = __tpl_cls__(5)
        for item in (1, 2, 3):
            s.__tpl_push__(item)
        self.assertEqual([s.__tpl_pop__(), s.__tpl_pop__(), s.__tpl_pop__()], [3, 2, 1])
        self.assertTrue(s.is_empty())

    def test_overflow(self):
        s = __tpl_cls__(3)
        for item in range(3):
            s.__tpl_push__(item)
        self.assertTrue(s.is_full())
        self.assertEqual(s.free(), 0)
        with self.assertRaises(__tpl_cls__Error):
            s.__tpl_push__(99)
        self.assertEqual(len(s), 3)
        s.__tpl_pop__()
        self.assertFalse(s.is_full())

    def test_underflow(self):
        s = __tpl_cls__()
        with self.assertRaises(__tpl_cls__Error):
            s.__tpl_pop__()
        with self.assertRaises(__tpl_cls__Error):
            s.peek()

    def test_peek_does_not_remove(self):
        s = __tpl_cls__()
        s.__tpl_push__("x")
        s.__tpl_push__("y")
        self.assertEqual(s.peek(), "y")
        self.assertEqual(len(s), 2)

    def test_pop_many(self):
        s = __tpl_cls__(8)
        for item in range(1, 6):
            s.__tpl_push__(item)
        self.assertEqual(s.__tpl_pop_many__(2), [5, 4])
        self.assertEqual(len(s), 3)
        self.assertEqual(s.__tpl_pop_many__(0), [])
        self.assertEqual(len(s), 3)
        self.assertEqual(s.__tpl_pop_many__(3), [3, 2, 1])
        self.assertTrue(s.is_empty())

    def test_pop_many_bad_counts(self):
        s = __tpl_cls__(4)
        s.__tpl_push__(1)
        with self.assertRaises(__tpl_cls__Error):
            s.__tpl_pop_many__(2)
        with self.assertRaises(__tpl_cls__Error):
            s.__tpl_pop_many__(-1)
        self.assertEqual(s.__tpl_pop_many__(1), [1])

    def test_top(self):
        s = __tpl_cls__(8)
        for item in range(1, 6):
            s.__tpl_push__(item)
        self.assertEqual(s.top(2), [5, 4])
        self.assertEqual(s.top(1), [5])
        self.assertEqual(s.top(), [5, 4, 3, 2, 1][:__tpl_topn__])
        self.assertEqual(s.top(0), [])
        self.assertEqual(s.top(-1), [])
        self.assertEqual(len(s), 5)


if __name__ == "__main__":
    unittest.main()
