"""Radix prefix cache: KV pages of past and running requests in a tree keyed by token ids.

The tree has one full page per edge (a radix tree at page granularity): a node's key is the
``page_size`` token ids of its page, so only whole pages are ever shared and a request's last,
partly filled page stays private. A running request locks the deepest node its pages reach; a
lock counts on every node up to the root, so a node's count is never below its children's and
every unlocked node can be evicted (leaves first, least recently used first).

Page ownership: a page is on the allocator's free list, or in the tree (and then maybe also in
the page lists of the requests that lock it), or private to exactly one running request. When
idle, free + tree pages == total.

With a disk tier (prefix_disk.py) each node also has its page's chained key; new full pages are
saved as the tree takes them in (and, if that save was dropped, when evicted), and admission
loads the pages of a prefix the tree lacks from disk before computing anything.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from minisgl_core.engine.kv_cache import PageAllocator
from minisgl_core.engine.request import Request

if TYPE_CHECKING:
    from minisgl_core.engine.prefix_disk import DiskTier


class Node:
    """One cached page: its tokens (the key under its parent), page id, lock count, LRU stamp,
    and with a disk tier its chained key and whether it was handed to the writer."""

    __slots__ = ("children", "digest", "key", "page", "parent", "ref", "saved", "stamp")

    def __init__(self, parent: Node | None, key: tuple[int, ...], page: int, stamp: int,
                 digest: bytes = b"") -> None:
        self.parent = parent
        self.digest = digest
        self.saved = False
        self.key = key
        self.page = page
        self.children: dict[tuple[int, ...], Node] = {}
        self.ref = 0  # running requests whose locked node is this one or below it
        self.stamp = stamp


class RadixCache:
    """The tree, its page counts and the request-level operations the scheduler calls."""

    def __init__(self, allocator: PageAllocator, page_size: int) -> None:
        self.allocator = allocator
        self.page_size = page_size
        self._clock = itertools.count(1)
        self.root = Node(None, (), 0, 0)
        self.num_pages = 0  # pages held by the tree
        self.num_evictable = 0  # tree pages no running request locks
        self.hit_tokens = 0  # tokens admissions did not have to compute
        self.evicted_pages = 0
        self.disk: DiskTier | None = None

    def attach_disk(self, disk: DiskTier) -> None:
        """Save full pages to ``disk`` and load missing prefixes from it (before any insert)."""
        self.disk = disk
        self.root.digest = disk.root_key

    # ---- the tree -------------------------------------------------------------------------------

    def match(self, tokens: Sequence[int]) -> tuple[Node, list[int]]:
        """The deepest node whose path is a whole-page prefix of ``tokens``, and its pages."""
        node, pages, p = self.root, [], self.page_size
        for i in range(0, len(tokens) - p + 1, p):
            child = node.children.get(tuple(tokens[i:i + p]))
            if child is None:
                break
            node = child
            pages.append(child.page)
        return node, pages

    def insert(self, node: Node, tokens: Sequence[int], pages: Sequence[int],
               from_disk: bool = False) -> tuple[Node, list[int], list[int]]:
        """Hang ``pages`` (holding ``tokens``, len(pages) * page_size of them) below ``node``.

        Returns the deepest node, the page the tree holds for each position (the given one, or
        the one already there) and the given pages the tree already had (the caller frees them).
        New pages are saved to the disk tier unless they came ``from_disk``.
        """
        p, path, dups, fresh = self.page_size, [], [], []
        for j, page in enumerate(pages):
            key = tuple(tokens[j * p:(j + 1) * p])
            child = node.children.get(key)
            if child is None:
                digest = b"" if self.disk is None else self.disk.key(node.digest, key)
                child = Node(node, key, page, next(self._clock), digest)
                child.saved = from_disk
                node.children[key] = child
                self.num_pages += 1
                self.num_evictable += 1
                fresh.append(child)
            elif child.page != page:
                dups.append(page)
            path.append(child.page)
            node = child
        if not from_disk:
            self._save(fresh)
        return node, path, dups

    def _save(self, nodes: list[Node]) -> None:
        if self.disk is not None and nodes:
            saved = self.disk.save([n.digest for n in nodes], [n.page for n in nodes])
            for n in nodes:
                n.saved = saved

    def lock(self, node: Node) -> None:
        """One more running request uses the path root..node."""
        stamp = next(self._clock)
        while node is not self.root and node is not None:
            if node.ref == 0:
                self.num_evictable -= 1
            node.ref += 1
            node.stamp = stamp
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: Node) -> None:
        """Undo one lock(node); the path counts as just used for LRU."""
        stamp = next(self._clock)
        while node is not self.root and node is not None:
            node.ref -= 1
            if node.ref < 0:
                raise RuntimeError("prefix cache node unlocked more often than locked")
            if node.ref == 0:
                self.num_evictable += 1
            node.stamp = stamp
            node = node.parent  # type: ignore[assignment]

    def evict(self, num_pages: int) -> int:
        """Free up to ``num_pages`` unlocked pages, least recently used leaves first."""
        heap = [(n.stamp, id(n), n) for n in self._nodes() if not n.children and n.ref == 0]
        heapq.heapify(heap)
        freed: list[int] = []
        unsaved: list[Node] = []
        while heap and len(freed) < num_pages:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key]
            freed.append(leaf.page)
            if not leaf.saved:
                unsaved.append(leaf)
            if parent is not self.root and not parent.children and parent.ref == 0:
                heapq.heappush(heap, (parent.stamp, id(parent), parent))
        self.num_pages -= len(freed)
        self.num_evictable -= len(freed)
        self.evicted_pages += len(freed)
        self._save(unsaved)  # copies the pages out before they go back to the free list
        self.allocator.free(freed)
        return len(freed)

    def _nodes(self) -> list[Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def pages(self) -> list[int]:
        """Every page the tree holds (for accounting checks)."""
        return [n.page for n in self._nodes()]

    # ---- requests -------------------------------------------------------------------------------

    def admit(self, req: Request) -> int:
        """Lock the longest cached prefix of ``req``'s tokens; set its pages and num_cached.

        At least the last token is left out so the request has one to compute (for logits).
        """
        tokens = req.token_slice(0, req.num_tokens - 1)
        node, pages = self.match(tokens)
        self.lock(node)
        if self.disk is not None:
            node, pages = self._load(node, pages, tokens)
        req.cache_node, req.num_shared_pages = node, len(pages)
        req.pages = pages
        req.num_cached = len(pages) * self.page_size
        return req.num_cached

    def _load(self, node: Node, pages: list[int], tokens: Sequence[int]) -> tuple[Node, list[int]]:
        """Extend the locked match ``node`` with the next full pages of ``tokens`` found on disk
        (as many as there is room for, one page left to compute in); the new node is locked."""
        assert self.disk is not None
        p, start = self.page_size, len(pages)
        room = self.allocator.num_free + self.num_evictable - 1
        wanted = [tokens[i:i + p] for i in range(start * p, len(tokens) - p + 1, p)][:max(room, 0)]

        def take(n: int) -> list[int]:
            short = n - self.allocator.num_free
            if short > 0:  # never our match: its path is locked
                self.evict(short)
            return self.allocator.alloc(n)

        loaded = self.disk.load_prefix(node.digest, wanted, take)
        if not loaded:
            return node, pages
        deep, path, dups = self.insert(node, tokens[start * p:(start + len(loaded)) * p], loaded,
                                       from_disk=True)
        self.allocator.free(dups)  # none: the tree had no child where the match stopped
        self.lock(deep)
        self.unlock(node)
        return deep, pages + path

    def update(self, req: Request) -> None:
        """Share ``req``'s newly completed full pages through the tree and move its lock down.

        A page the tree already had for the same tokens replaces the request's own copy, which is
        freed at once (full pages are never written again, so the swap is safe mid-flight).
        """
        full, start = req.num_cached // self.page_size, req.num_shared_pages
        if full <= start or req.cache_node is None:
            return
        p, old = self.page_size, req.cache_node
        node, path, dups = self.insert(old, req.token_slice(start * p, full * p),
                                       req.pages[start:full])
        req.pages[start:full] = path
        self.lock(node)
        self.unlock(old)
        req.cache_node, req.num_shared_pages = node, full
        self.allocator.free(dups)

    def release(self, req: Request) -> None:
        """A request ends or is preempted: keep its full pages in the tree, free the rest."""
        if req.cache_node is None:  # never admitted: it holds nothing
            return
        self.update(req)
        tail, req.pages = req.pages[req.num_shared_pages:], []
        self.allocator.free(tail)
        self.unlock(req.cache_node)
        req.cache_node, req.num_shared_pages, req.num_cached = None, 0, 0
