"""Course tooling: finding lessons, your numbers, the course pages, and new-lesson skeletons."""
