"""The probe ``bench.tail`` loads into the served processes (see sitecustomize.py)."""
