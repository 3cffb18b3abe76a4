"""A stock __tpl_cls__: quantities and unit prices per SKU."""


class OutOfStock(Exception):
    """Raised when removing more than is in stock."""


class __tpl_cls__:
    def __init__(self, reorder_level=__tpl_reorder__):
        self.reorder_level = reorder_level
        self._stock = {}
        self._prices = {}

    def __tpl_add__(self, sku, qty, price=None):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self._stock[sku] = self._stock.get(sku, 0) + qty
        if price is not None:
            self._prices[sku] = price

    def __tpl_remove__(self, sku, qty):
        have = self._stock.get(sku, 0)
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if qty > have:
            raise OutOfStock(sku)
        if qty == have:
            del self._stock[sku]
        else:
            self._stock[sku] = have - qty
        return have - qty

    def quantity(self, sku):
        return self._stock.get(sku, 0)

    def skus(self):
        return sorted(self._stock)

    def value(self):
        return sum(qty * self._prices.get(sku, 0) for sku, qty in self._stock.items())

    def needs_reorder(self):
        return sorted(sku for sku, qty in self._stock.items() if qty < self.reorder_level)

    def most_stocked(self, n=__tpl_top__):
        ranked = sorted(self._stock.items(), key=lambda kv: (-kv[1], kv[0]))
        return [sku for sku, _ in ranked[:n]]

    def move_to(self, other, sku, qty):
        self.__tpl_remove__(sku, qty)
        other.__tpl_add__(sku, qty, self._prices.get(sku))
