"""A priority __tpl_cls__: higher priority first, first come first served within a priority."""

import heapq


class __tpl_cls__:
    def __init__(self, default_priority=__tpl_prio__):
        self.default_priority = default_priority
        self._heap = []
        self._counter = 0
        self._cancelled = set()

    def __tpl_submit__(self, name, priority=None):
        if priority is None:
            priority = self.default_priority
        if priority < 0:
            raise ValueError("priority must not be negative")
        self._counter += 1
        heapq.heappush(self._heap, (-priority, self._counter, name))
        return self._counter

    def cancel(self, ticket):
        if ticket < 1 or ticket > self._counter:
            raise KeyError(ticket)
        self._cancelled.add(ticket)

    def __len__(self):
        return sum(1 for _, ticket, _ in self._heap if ticket not in self._cancelled)

    def _drop_cancelled(self):
        while self._heap and self._heap[0][1] in self._cancelled:
            _, ticket, _ = heapq.heappop(self._heap)
            self._cancelled.discard(ticket)

    def peek(self):
        self._drop_cancelled()
        if not self._heap:
            raise IndexError("nothing scheduled")
        return self._heap[0][2]

    def __tpl_next__(self):
        self._drop_cancelled()
        if not self._heap:
            raise IndexError("nothing scheduled")
        return heapq.heappop(self._heap)[2]

    def run_all(self):
        order = []
        while len(self) > 0:
            order.append(self.__tpl_next__())
        return order

    def age(self, boost=__tpl_boost__):
        """Raise every waiting task's priority by ``boost``."""
        self._heap = [(p - boost, ticket, name) for p, ticket, name in self._heap]
        heapq.heapify(self._heap)

    def pending(self):
        return [name for _, ticket, name in sorted(self._heap) if ticket not in self._cancelled]
