"""The archive's one error type: misuse by a caller, or on-disk damage that cannot be repaired silently."""

from __future__ import annotations


class ArchiveError(Exception):
    """Raised for caller misuse (append at the wrong position, read off a frame boundary, truncate out of
    range) and for damage the archive must not paper over (a corrupt segment that is not the last one, a
    corrupt snapshot). A torn *tail* is not an error: it is repaired on open and reported as a TailRepair."""
