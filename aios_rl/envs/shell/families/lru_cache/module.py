"""A least-recently-used __tpl_cls__ with hit statistics."""

from collections import OrderedDict


class __tpl_cls__:
    def __init__(self, capacity=__tpl_cap__):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data

    def __tpl_get__(self, key, default=None):
        if key in self._data:
            self._data.move_to_end(key)
            self.hits += 1
            return self._data[key]
        self.misses += 1
        return default

    def __tpl_put__(self, key, value):
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        evicted = []
        while len(self._data) > self.capacity:
            evicted.append(self._data.popitem(last=False)[0])
        return evicted

    def keys(self):
        """Least recently used first."""
        return list(self._data)

    def hit_rate(self):
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def resize(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        evicted = []
        while len(self._data) > capacity:
            evicted.append(self._data.popitem(last=False)[0])
        return evicted
