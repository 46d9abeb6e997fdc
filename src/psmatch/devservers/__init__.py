"""Development servers."""
