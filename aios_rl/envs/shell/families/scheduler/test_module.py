import unittest

from __tpl_module__ import __tpl_cls__


class __tpl_cls__Test(unittest.TestCase):
    def test_priority_order(self):
        s = __tpl_cls__()
        s.__tpl_submit__("low", 1)
        s.__tpl_submit__("high", 9)
        s.__tpl_submit__("mid", 5)
        self.assertEqual(s.run_all(), ["high", "mid", "low"])

    def test_fifo_within_priority(self):
        s = __tpl_cls__()
        for name in "abc":
            s.__tpl_submit__(name, 3)
        s.__tpl_submit__("z", 4)
        self.assertEqual(s.run_all(), ["z", "a", "b", "c"])

    def test_default_priority(self):
        s = __tpl_cls__()
        self.assertEqual(s.default_priority, __tpl_prio__)
        s.__tpl_submit__("below", __tpl_prio__ - 1)
        s.__tpl_submit__("default")
        s.__tpl_submit__("above", __tpl_prio__ + 1)
        self.assertEqual(s.run_all(), ["above", "default", "below"])
        self.assertEqual(__tpl_cls__(default_priority=7).default_priority, 7)

    def test_tickets(self):
        s = __tpl_cls__()
        self.assertEqual(s.__tpl_submit__("a", 1), 1)
        self.assertEqual(s.__tpl_submit__("b", 1), 2)
        with self.assertRaises(ValueError):
            s.__tpl_submit__("c", -1)
        self.assertEqual(s.__tpl_submit__("zero", 0), 3)

    def test_len_and_peek(self):
        s = __tpl_cls__()
        self.assertEqual(len(s), 0)
        with self.assertRaises(IndexError):
            s.peek()
        with self.assertRaises(IndexError):
            s.__tpl_next__()
        s.__tpl_submit__("a", 2)
        s.__tpl_submit__("b", 3)
        self.assertEqual(len(s), 2)
        self.assertEqual(s.peek(), "b")
        self.assertEqual(len(s), 2)

    def test_cancel(self):
        s = __tpl_cls__()
        t1 = s.__tpl_submit__("a", 5)
        s.__tpl_submit__("b", 4)
        t3 = s.__tpl_submit__("c", 3)
        s.cancel(t1)
        s.cancel(t3)
        self.assertEqual(len(s), 1)
        self.assertEqual(s.peek(), "b")
        self.assertEqual(s.run_all(), ["b"])
        with self.assertRaises(KeyError):
            s.cancel(99)
        with self.assertRaises(KeyError):
            s.cancel(0)

    def test_age(self):
        s = __tpl_cls__()
        s.__tpl_submit__("a", 1)
        s.__tpl_submit__("b", 2)
        s.age(10)
        self.assertEqual(s.pending(), ["b", "a"])
        s.__tpl_submit__("c", 12)
        self.assertEqual(s.run_all(), ["b", "c", "a"])
        t = __tpl_cls__()
        t.__tpl_submit__("old", 1)
        t.age()
        t.__tpl_submit__("new", 1 + __tpl_boost__)
        self.assertEqual(t.run_all(), ["old", "new"])

    def test_pending(self):
        s = __tpl_cls__()
        s.__tpl_submit__("x", 1)
        t = s.__tpl_submit__("y", 2)
        s.__tpl_submit__("z", 2)
        s.cancel(t)
        self.assertEqual(s.pending(), ["z", "x"])


if __name__ == "__main__":
    unittest.main()
