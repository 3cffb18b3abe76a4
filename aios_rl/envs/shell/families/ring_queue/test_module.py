import unittest

from __tpl_module__ import QueueEmpty, QueueFull, __tpl_cls__


class __tpl_cls__Test(unittest.TestCase):
    def test_defaults(self):
        q = __tpl_cls__()
        self.assertEqual(q.size, __tpl_size__)
        self.assertEqual(len(q), 0)
        self.assertFalse(q.is_full())

    def test_bad_size(self):
        with self.assertRaises(ValueError):
            __tpl_cls__(0)
        self.assertEqual(__tpl_cls__(1).size, 1)

    def test_first_in_first_out(self):
        q = __tpl_cls__(4)
        for item in "abc":
            q.__tpl_put__(item)
        self.assertEqual(len(q), 3)
        self.assertEqual(q.peek(), "a")
        self.assertEqual([q.__tpl_get__(), q.__tpl_get__(), q.__tpl_get__()], ["a", "b", "c"])
        self.assertEqual(len(q), 0)

    def test_full(self):
        q = __tpl_cls__(2)
        q.__tpl_put__(1)
        self.assertFalse(q.is_full())
        q.__tpl_put__(2)
        self.assertTrue(q.is_full())
        with self.assertRaises(QueueFull):
            q.__tpl_put__(3)
        self.assertEqual(q.to_list(), [1, 2])

    def test_empty(self):
        q = __tpl_cls__(2)
        with self.assertRaises(QueueEmpty):
            q.__tpl_get__()
        with self.assertRaises(QueueEmpty):
            q.peek()

    def test_wraps_around(self):
        q = __tpl_cls__(3)
        for item in (1, 2, 3):
            q.__tpl_put__(item)
        self.assertEqual(q.__tpl_get__(), 1)
        self.assertEqual(q.__tpl_get__(), 2)
        q.__tpl_put__(4)
        q.__tpl_put__(5)
        self.assertTrue(q.is_full())
        self.assertEqual(q.to_list(), [3, 4, 5])
        self.assertEqual(q.peek(), 3)
        self.assertEqual([q.__tpl_get__(), q.__tpl_get__(), q.__tpl_get__()], [3, 4, 5])

    def test_drain(self):
        q = __tpl_cls__(5)
        for item in range(5):
            q.__tpl_put__(item)
        self.assertEqual(q.drain(2), [0, 1])
        self.assertEqual(q.drain(0), [])
        self.assertEqual(q.drain(), [2, 3, 4])
        self.assertEqual(q.drain(), [])

    def test_rotate(self):
        q = __tpl_cls__(4)
        for item in "wxyz":
            q.__tpl_put__(item)
        q.rotate(1)
        self.assertEqual(q.to_list(), list("xyzw"))
        q.rotate(6)
        self.assertEqual(q.to_list(), list("zwxy"))
        q.rotate()
        self.assertEqual(q.to_list(), (list("zwxy") * 2)[__tpl_steps__ % 4:__tpl_steps__ % 4 + 4])

    def test_rotate_empty(self):
        q = __tpl_cls__(2)
        q.rotate(3)
        self.assertEqual(q.to_list(), [])


if __name__ == "__main__":
    unittest.main()
