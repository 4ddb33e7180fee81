"""Choosing between the backends, the layer above them: which backend and device a flushed program runs on
(selection.py: the setting, the fallback policy for equations a backend has no rule for), the checking mode that runs
a program on two backends and compares (check.py), and the backend that measures both and keeps the faster
(auto.py)."""
