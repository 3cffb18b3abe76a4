"""A fixed-size circular __tpl_cls__: first in, first out."""


class QueueFull(Exception):
    """Raised when putting into a full queue."""


class QueueEmpty(Exception):
    """Raised when taking from an empty queue."""


class __tpl_cls__:
    def __init__(self, size=__tpl_size__):
        if size <= 0:
            raise ValueError("size must be positive")
        self._slots = [None] * size
        self._head = 0
        self._count = 0

    @property
    def size(self):
        return len(self._slots)

    def __len__(self):
        return self._count

    def is_full(self):
        return self._count == len(self._slots)

    def __tpl_put__(self, item):
        if self.is_full():
            raise QueueFull(item)
        tail = (self._head + self._count) % len(self._slots)
        self._slots[tail] = item
        self._count += 1

    def __tpl_get__(self):
        if self._count == 0:
            raise QueueEmpty()
        item = self._slots[self._head]
        self._slots[self._head] = None
        self._head = (self._head + 1) % len(self._slots)
        self._count -= 1
        return item

    def peek(self):
        if not self._count:
            raise QueueEmpty()
        return self._slots[self._head]

    def to_list(self):
        return [self._slots[(self._head + i) % len(self._slots)] for i in range(self._count)]

    def drain(self, limit=None):
        out = []
        while self._count > 0 and (limit is None or len(out) < limit):
            out.append(self.__tpl_get__())
        return out

    def rotate(self, steps=__tpl_steps__):
        """Move the first ``steps`` items to the back."""
        for _ in range(steps % max(self._count, 1)):
            self.__tpl_put__(self.__tpl_get__())
