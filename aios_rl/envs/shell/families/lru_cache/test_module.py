import unittest

from __tpl_module__ import __tpl_cls__


class __tpl_cls__Test(unittest.TestCase):
    def test_defaults(self):
        c = __tpl_cls__()
        self.assertEqual(c.capacity, __tpl_cap__)
        self.assertEqual(len(c), 0)
        with self.assertRaises(ValueError):
            __tpl_cls__(0)
        self.assertEqual(__tpl_cls__(1).capacity, 1)

    def test_get_and_put(self):
        c = __tpl_cls__(3)
        self.assertEqual(c.__tpl_put__("a", 1), [])
        self.assertEqual(c.__tpl_get__("a"), 1)
        self.assertIsNone(c.__tpl_get__("b"))
        self.assertEqual(c.__tpl_get__("b", 0), 0)
        self.assertIn("a", c)
        self.assertNotIn("b", c)

    def test_eviction_order(self):
        c = __tpl_cls__(2)
        c.__tpl_put__("a", 1)
        c.__tpl_put__("b", 2)
        self.assertEqual(c.__tpl_put__("c", 3), ["a"])
        self.assertEqual(c.keys(), ["b", "c"])
        self.assertEqual(len(c), 2)

    def test_get_refreshes(self):
        c = __tpl_cls__(2)
        c.__tpl_put__("a", 1)
        c.__tpl_put__("b", 2)
        c.__tpl_get__("a")
        self.assertEqual(c.__tpl_put__("c", 3), ["b"])
        self.assertEqual(c.keys(), ["a", "c"])

    def test_put_existing_refreshes_and_updates(self):
        c = __tpl_cls__(2)
        c.__tpl_put__("a", 1)
        c.__tpl_put__("b", 2)
        self.assertEqual(c.__tpl_put__("a", 10), [])
        self.assertEqual(c.keys(), ["b", "a"])
        self.assertEqual(c.__tpl_get__("a"), 10)
        self.assertEqual(len(c), 2)

    def test_hit_rate(self):
        c = __tpl_cls__(3)
        self.assertEqual(c.hit_rate(), 0.0)
        c.__tpl_put__("a", 1)
        c.__tpl_get__("a")
        c.__tpl_get__("a")
        c.__tpl_get__("x")
        self.assertEqual((c.hits, c.misses), (2, 1))
        self.assertAlmostEqual(c.hit_rate(), 2 / 3)

    def test_resize(self):
        c = __tpl_cls__(4)
        for i in range(4):
            c.__tpl_put__(i, i * i)
        self.assertEqual(c.resize(2), [0, 1])
        self.assertEqual(c.keys(), [2, 3])
        self.assertEqual(c.resize(5), [])
        self.assertEqual(c.capacity, 5)
        with self.assertRaises(ValueError):
            c.resize(0)


if __name__ == "__main__":
    unittest.main()
