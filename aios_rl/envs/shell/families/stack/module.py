"""A bounded __tpl_cls__: last in, first out."""


class __tpl_cls__Error(Exception):
    """Raised on overflow, underflow or a bad argument."""


class __tpl_cls__:
    def __init__(self, capacity=__tpl_cap__):
        if capacity < 1:
            raise __tpl_cls__Error("capacity must be positive")
        self.capacity = capacity
        self._items = []

    def __len__(self):
        return len(self._items)

    def is_empty(self):
        return len(self._items) == 0

    def is_full(self):
        return len(self._items) >= self.capacity

    def free(self):
        return self.capacity - len(self._items)

    def __tpl_push__(self, item):
        if self.is_full():
            raise __tpl_cls__Error("overflow")
        self._items.append(item)
        return len(self._items)

    def __tpl_pop__(self):
        if self.is_empty():
            raise __tpl_cls__Error("underflow")
        return self._items.pop()

    def peek(self):
        if not self._items:
            raise __tpl_cls__Error("empty")
        return self._items[-1]

    def __tpl_pop_many__(self, count):
        if count < 0 or count > len(self._items):
            raise __tpl_cls__Error("bad count")
        cut = len(self._items) - count
        taken = self._items[cut:]
        del self._items[cut:]
        return taken[::-1]

    def top(self, n=__tpl_topn__):
        """The n most recent items, most recent first."""
        if n <= 0:
            return []
        return list(reversed(self._items[-n:]))
