"""The local backend: ranks are processes on this machine (``launch(..., cluster=None)``).

Ways to start them are one small class each behind the ``Starter`` interface (``fork``, ``spawn``
through the start server ``server``, ``xla``), chosen by ``backend.LocalBackend`` from the resolved
start method; the kernel hosts their store (``rendezvous``, ``signed_store``, ``stores``). This
package runs in the kernel; what runs in the started processes is in ``rank/``. Everything after
the start — reading output, errors, stopping — is the same for all starters.

Examples:
    >>> from notebook_launcher.backends import get_backend
    >>> get_backend("local").name
    'local'
"""
