"""The view interface; this base shows nothing (``display="none"``)."""


class LaunchView:
    """Receives a launch's events from its supervisor thread. Override what you show."""

    def on_start(self, launch):
        pass

    def on_status(self, rank, status):
        pass

    def on_output(self, rank, stream, text):
        pass

    def on_metric(self, rank, metric):
        pass

    def flush(self):
        """Called after each batch of events, so output can be shown in chunks, not line by line."""

    def on_finish(self, launch):
        pass
