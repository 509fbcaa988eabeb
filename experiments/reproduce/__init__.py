"""Published results reproduced side by side (see __main__.py)."""
