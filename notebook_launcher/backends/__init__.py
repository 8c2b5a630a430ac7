"""Where ranks run: one package per backend (``local``: processes on this machine; ``ray``: actors on
a Ray cluster)."""
