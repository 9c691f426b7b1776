"""A slow, token-level reference of SGLang's RadixCache, written for clarity.

It is the independent implementation the compiled radix kernel is checked against on
random traces (``tests/test_tiers_sglang.py``); SGLang's own class is checked on the real
Mooncake trace through ``tests/data/sglang_peer_mooncake.npz``. It keeps token lists in
nodes (no pieces, no arrays) and follows the rules of ``radix_cache.py`` 0.5.23: page-
aligned keys, one new leaf per insert, a split when a match ends inside a node (the split
node is stamped first, the new prefix node gets a fresh stamp), whole-leaf eviction by
(policy key, last access) until at least the shortfall is freed.
"""

from __future__ import annotations

import heapq
import itertools


class _Node:
    ids = itertools.count()

    def __init__(self, key: list[int], parent: _Node | None, stamp: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[tuple[int, ...], _Node] = {}
        self.stamp = stamp
        self.hits = 0
        self.lock = 0
        self.id = next(_Node.ids)


class RadixReference:
    """Sequential driver: ``request(tokens)`` returns the device hit tokens."""

    def __init__(self, page: int, capacity: int, policy: str = "lru") -> None:
        self.page, self.capacity, self.policy = page, capacity, policy
        self.clock = 0
        self.root = _Node([], None, self._tick())
        self.root.lock = 1
        self.size = 0

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _child_key(self, key: list[int]) -> tuple[int, ...]:
        return tuple(key[: self.page])

    def _common(self, a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n // self.page * self.page

    def _split(self, node: _Node, at: int) -> _Node:
        self._tick()  # TreeNode(): last_access_time, then creation_time
        new = _Node(node.key[:at], node.parent, self.clock)
        self._tick()
        new.hits, new.lock = node.hits, node.lock
        node.parent.children[self._child_key(node.key)] = new
        node.key = node.key[at:]
        node.parent = new
        new.children[self._child_key(node.key)] = node
        return new

    def match(self, key: list[int]) -> tuple[int, _Node]:
        t = self._tick()
        node, matched = self.root, 0
        while key and self._child_key(key) in node.children:
            child = node.children[self._child_key(key)]
            child.stamp = t
            n = self._common(child.key, key)
            if n < len(child.key):
                return matched + n, self._split(child, n)
            matched += n
            node, key = child, key[n:]
        return matched, node

    def insert(self, key: list[int]) -> None:
        t = self._tick()
        node = self.root
        while key and self._child_key(key) in node.children:
            node = node.children[self._child_key(key)]
            node.stamp = t
            node.hits += 1
            key = key[len(node.key):]  # the match just split at the boundary
        if key:
            self._tick()
            leaf = _Node(key, node, self.clock)
            self._tick()
            leaf.hits = 1
            node.children[self._child_key(key)] = leaf
            self.size += len(key)

    def _priority(self, n: _Node) -> tuple[int, int, int]:
        first = {"lfu": n.hits, "slru": int(n.hits >= 2)}.get(self.policy, 0)
        return (first, n.stamp, n.id)

    def evict(self, tokens: int) -> None:
        stack, heap = [self.root], []
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            if n is not self.root and not n.children and n.lock == 0:
                heap.append((self._priority(n), n))
        heapq.heapify(heap)
        freed = 0
        while freed < tokens and heap:
            _, n = heapq.heappop(heap)
            del n.parent.children[self._child_key(n.key)]
            freed += len(n.key)
            self.size -= len(n.key)
            p = n.parent
            if p is not self.root and not p.children and p.lock == 0:
                heapq.heappush(heap, (self._priority(p), p))

    def _lock(self, node: _Node, delta: int) -> None:
        while node is not self.root:
            node.lock += delta
            node = node.parent

    def request(self, tokens: list[int]) -> int:
        """One request alone: match, lock, evict the shortfall, insert, unlock."""
        aligned = len(tokens) // self.page * self.page
        slots = -(-len(tokens) // self.page) * self.page
        if self.capacity >= 0 and slots > self.capacity:
            return 0  # larger than the device: served without the cache
        key = tokens[:aligned]
        hit, node = self.match(key) if key else (0, self.root)
        self._lock(node, 1)
        need = slots - hit
        if self.capacity >= 0 and need > self.capacity - self.size:
            self.evict(need - (self.capacity - self.size))
        self.insert(key)
        self._lock(node, -1)
        return hit


def tokens_of(hashes: list[int], prompt: int, block: int) -> list[int]:
    """Token ``j`` of block ``h`` is ``h * block + j`` (as benchmarks/sglang_peer.py)."""
    return [h * block + j for h in hashes for j in range(block)][:prompt]
