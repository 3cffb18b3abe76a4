import unittest

from __tpl_module__ import __tpl_cls__, InsufficientFunds


class __tpl_cls__Test(unittest.TestCase):
    def test_open(self):
        acct = __tpl_cls__("ann")
        self.assertEqual(acct.owner, "ann")
        self.assertEqual(acct.balance, 0)
        self.assertEqual(acct.overdraft, __tpl_overdraft__)
        self.assertEqual(acct.available(), __tpl_overdraft__)
        self.assertEqual(__tpl_cls__("bo", 500, 100).available(), 600)
        with self.assertRaises(ValueError):
            __tpl_cls__("x", -1)
        with self.assertRaises(ValueError):
            __tpl_cls__("x", 0, -5)

    def test_deposit(self):
        acct = __tpl_cls__("ann", 100)
        self.assertEqual(acct.__tpl_deposit__(50), 150)
        self.assertEqual(acct.history, [("deposit", 50)])
        for bad in (0, -10):
            with self.assertRaises(ValueError):
                acct.__tpl_deposit__(bad)
        self.assertEqual(acct.balance, 150)

    def test_withdraw_with_fee(self):
        acct = __tpl_cls__("ann", 1000, 0)
        self.assertEqual(acct.__tpl_withdraw__(100, fee=5), 895)
        self.assertEqual(acct.history, [("withdraw", 105)])
        self.assertEqual(acct.__tpl_withdraw__(100), 795 - __tpl_fee__)
        with self.assertRaises(ValueError):
            acct.__tpl_withdraw__(0)

    def test_overdraft_limit(self):
        acct = __tpl_cls__("ann", 100, 50)
        self.assertEqual(acct.__tpl_withdraw__(150, fee=0), -50)
        with self.assertRaises(InsufficientFunds):
            acct.__tpl_withdraw__(1, fee=0)
        self.assertEqual(acct.balance, -50)
        exact = __tpl_cls__("bo", 10, 5)
        self.assertEqual(exact.__tpl_withdraw__(13, fee=2), -5)

    def test_insufficient_funds_says_how_much(self):
        acct = __tpl_cls__("ann", 10, 0)
        with self.assertRaises(InsufficientFunds) as ctx:
            acct.__tpl_withdraw__(15, fee=1)
        self.assertEqual(ctx.exception.args, (6,))
        self.assertEqual(acct.history, [])

    def test_transfer(self):
        a = __tpl_cls__("a", 300, 0)
        b = __tpl_cls__("b", 20, 0)
        self.assertEqual(a.transfer(b, 120), (180, 140))
        self.assertEqual(a.history, [("withdraw", 120)])
        self.assertEqual(b.history, [("deposit", 120)])
        with self.assertRaises(InsufficientFunds):
            a.transfer(b, 181)
        self.assertEqual((a.balance, b.balance), (180, 140))

    def test_interest(self):
        acct = __tpl_cls__("ann", 1000)
        self.assertEqual(acct.apply_interest(5), 50)
        self.assertEqual(acct.balance, 1050)
        self.assertEqual(acct.apply_interest(), 1050 * __tpl_rate__ // 100)
        self.assertEqual(__tpl_cls__("bo", 0).apply_interest(10), 0)
        self.assertEqual(__tpl_cls__("cy", 199).apply_interest(1), 1)

    def test_statement_and_totals(self):
        acct = __tpl_cls__("ann", 0, 0)
        for amount in range(1, 8):
            acct.__tpl_deposit__(amount)
        acct.__tpl_withdraw__(3, fee=1)
        self.assertEqual(acct.statement(2), [("deposit", 7), ("withdraw", 4)])
        self.assertEqual(len(acct.statement()), __tpl_last__)
        self.assertEqual(acct.statement()[-1], ("withdraw", 4))
        self.assertEqual(acct.total("deposit"), 28)
        self.assertEqual(acct.total("withdraw"), 4)
        self.assertEqual(acct.total("interest"), 0)


if __name__ == "__main__":
    unittest.main()
