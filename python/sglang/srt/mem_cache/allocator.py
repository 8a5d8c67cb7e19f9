"""Paged allocators: hand out page ids; a page covers ``page_size`` token slots."""

from __future__ import annotations

from abc import ABC, abstractmethod


class BasePagedAllocator(ABC):
    """Allocates whole pages of a KV pool. Not thread-safe: one scheduler owns it."""

    def __init__(self, size: int, page_size: int) -> None:
        if size <= 0 or page_size <= 0 or size % page_size:
            raise ValueError(f"allocator size {size} must be a positive multiple of page_size {page_size}")
        self.size, self.page_size = size, page_size
        self.num_pages = size // page_size

    @abstractmethod
    def alloc(self, num_pages: int) -> list[int] | None:
        """``num_pages`` free page ids, or ``None`` (nothing taken) when too few are free."""

    @abstractmethod
    def free(self, pages: list[int]) -> None: ...

    @abstractmethod
    def available_pages(self) -> int: ...

    @abstractmethod
    def clear(self) -> None: ...


class PagedTokenToKVPoolAllocator(BasePagedAllocator):
    """A LIFO free list of page ids (recently freed pages are reused first)."""

    def __init__(self, size: int, page_size: int) -> None:
        super().__init__(size, page_size)
        self._free: list[int] = []
        self._used: set[int] = set()
        self.clear()

    def alloc(self, num_pages: int) -> list[int] | None:
        if num_pages < 0:
            raise ValueError(f"cannot allocate {num_pages} pages")
        if num_pages > len(self._free):
            return None
        pages = [self._free.pop() for _ in range(num_pages)]
        self._used.update(pages)
        return pages

    def free(self, pages: list[int]) -> None:
        for p in pages:
            if p not in self._used:
                raise ValueError(f"page {p} is not allocated (double free?)")
            self._used.remove(p)
            self._free.append(p)

    def available_pages(self) -> int:
        return len(self._free)

    def clear(self) -> None:
        self._free = list(reversed(range(self.num_pages)))
        self._used.clear()
