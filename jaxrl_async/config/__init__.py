"""Configs: ``fields`` (the field machinery: hyper and static fields, their checks) and
``shared`` (the runner configs and the fields every algorithm shares)."""
