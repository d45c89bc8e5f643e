"""Dots and Boxes, written from scratch for nash-league in both forms: ``boxes.vector`` (a
``VectorGame``, the fast path) and ``boxes.aec`` (a PettingZoo AEC environment); ``boxes.rules``
holds what both share."""
