"""A bank __tpl_cls__ with an overdraft limit, fees and interest; amounts in cents."""


class InsufficientFunds(Exception):
    """Raised when a withdrawal would go past the overdraft limit."""


class __tpl_cls__:
    def __init__(self, owner, balance=0, overdraft=__tpl_overdraft__):
        if balance < 0 or overdraft < 0:
            raise ValueError("negative opening balance or overdraft")
        self.owner = owner
        self.balance = balance
        self.overdraft = overdraft
        self.history = []

    def available(self):
        return self.balance + self.overdraft

    def __tpl_deposit__(self, amount):
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))
        return self.balance

    def __tpl_withdraw__(self, amount, fee=__tpl_fee__):
        if amount <= 0:
            raise ValueError("withdrawal must be positive")
        total = amount + fee
        if total > self.available():
            raise InsufficientFunds(total - self.available())
        self.balance -= total
        self.history.append(("withdraw", total))
        return self.balance

    def transfer(self, other, amount):
        self.__tpl_withdraw__(amount, fee=0)
        other.__tpl_deposit__(amount)
        return (self.balance, other.balance)

    def apply_interest(self, rate_percent=__tpl_rate__):
        if self.balance <= 0:
            return 0
        interest = self.balance * rate_percent // 100
        self.balance += interest
        self.history.append(("interest", interest))
        return interest

    def statement(self, last=__tpl_last__):
        return self.history[-last:]

    def total(self, kind):
        return sum(amount for k, amount in self.history if k == kind)
