import unittest

from __tpl_module__ import __tpl_cls__, OutOfStock


def stocked():
    inv = __tpl_cls__(reorder_level=5)
    inv.__tpl_add__("bolt", 10, price=3)
    inv.__tpl_add__("nut", 4, price=2)
    inv.__tpl_add__("gear", 7, price=20)
    inv.__tpl_add__("washer", 4)
    return inv


class __tpl_cls__Test(unittest.TestCase):
    def test_add_accumulates(self):
        inv = __tpl_cls__()
        inv.__tpl_add__("a", 2)
        inv.__tpl_add__("a", 3, price=7)
        self.assertEqual(inv.quantity("a"), 5)
        self.assertEqual(inv.quantity("missing"), 0)
        self.assertEqual(inv.value(), 35)
        with self.assertRaises(ValueError):
            inv.__tpl_add__("a", 0)

    def test_remove(self):
        inv = stocked()
        self.assertEqual(inv.__tpl_remove__("bolt", 4), 6)
        self.assertEqual(inv.quantity("bolt"), 6)
        self.assertEqual(inv.__tpl_remove__("bolt", 6), 0)
        self.assertNotIn("bolt", inv.skus())
        with self.assertRaises(OutOfStock):
            inv.__tpl_remove__("nut", 5)
        with self.assertRaises(OutOfStock):
            inv.__tpl_remove__("nothing", 1)
        with self.assertRaises(ValueError):
            inv.__tpl_remove__("nut", 0)
        self.assertEqual(inv.quantity("nut"), 4)

    def test_skus_sorted(self):
        self.assertEqual(stocked().skus(), ["bolt", "gear", "nut", "washer"])

    def test_value(self):
        self.assertEqual(stocked().value(), 10 * 3 + 4 * 2 + 7 * 20)
        self.assertEqual(__tpl_cls__().value(), 0)

    def test_reorder(self):
        inv = stocked()
        self.assertEqual(inv.needs_reorder(), ["nut", "washer"])
        inv.__tpl_add__("nut", 1)
        self.assertEqual(inv.needs_reorder(), ["washer"])
        self.assertEqual(__tpl_cls__().reorder_level, __tpl_reorder__)

    def test_most_stocked(self):
        inv = stocked()
        self.assertEqual(inv.most_stocked(2), ["bolt", "gear"])
        self.assertEqual(inv.most_stocked(4), ["bolt", "gear", "nut", "washer"])
        self.assertEqual(inv.most_stocked(), ["bolt", "gear", "nut", "washer"][:__tpl_top__])
        self.assertEqual(inv.most_stocked(0), [])

    def test_move_to(self):
        a, b = stocked(), __tpl_cls__()
        a.move_to(b, "gear", 3)
        self.assertEqual((a.quantity("gear"), b.quantity("gear")), (4, 3))
        self.assertEqual(b.value(), 60)
        with self.assertRaises(OutOfStock):
            a.move_to(b, "gear", 5)
        self.assertEqual(b.quantity("gear"), 3)


if __name__ == "__main__":
    unittest.main()
