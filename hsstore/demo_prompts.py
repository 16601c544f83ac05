"""The ten coding prompts the seeds' eval used, written out as chat samples."""

from __future__ import annotations

_TASKS = {
    "fizzbuzz": "Write a Python function fizzbuzz(n) that prints the numbers from 1 to n, but prints 'Fizz' for "
    "multiples of 3, 'Buzz' for multiples of 5 and 'FizzBuzz' for multiples of both.",
    "binary_search": "Implement binary_search(items, target) in Python for a sorted list. Return the index of target "
    "or -1, and explain why the loop terminates.",
    "linked_list_reverse": "Write a function that reverses a singly linked list in place and returns the new head. "
    "Define the Node class too, and handle the empty list.",
    "json_parser": "Write a small recursive-descent JSON parser in Python that supports objects, arrays, strings with "
    "escapes, numbers, true, false and null. Do not use the json module.",
    "async_rate_limiter": "Implement an asyncio rate limiter class that allows at most N calls per second across many "
    "concurrent tasks, using a token bucket. Show how a coroutine uses it.",
    "trie_autocomplete": "Build a Trie in Python with insert(word) and autocomplete(prefix, k) that returns the k most "
    "frequent words starting with prefix.",
    "merge_sort": "Write merge_sort(items) in Python, stable and without modifying its input. State its time and "
    "space complexity.",
    "lru_cache": "Implement an LRU cache class with get(key) and put(key, value) in O(1) time using a hash map and a "
    "doubly linked list, with a fixed capacity.",
    "graph_bfs": "Given an unweighted graph as an adjacency list, write a function that returns the shortest path "
    "between two nodes using breadth-first search, or None if there is none.",
    "matrix_multiply": "Write matrix_multiply(a, b) for two lists of lists in pure Python, check that the shapes "
    "agree, and then show a version using numpy.",
}

PROMPTS: list[dict] = [
    {"id": name, "messages": [{"role": "user", "content": text}], "chat_template_kwargs": {"enable_thinking": False}}
    for name, text in _TASKS.items()
]
