"""The inspector: server-rendered pages under /ui for operators (admin keys only)."""
