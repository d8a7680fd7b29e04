"""The temporary Prefect API's own process: Prefect's server app under uvicorn, booted cheaply.

    python -m flows.api_server PORT

What `uvicorn --factory prefect.server.api.server:create_app` would run (Prefect's ephemeral
mode runs the same app), with the garbage collector paused while the server's modules are
imported: the import builds millions of long-lived objects, and the collector's passes over
them cost a fifth of the boot (measured: 2.4 s of CPU instead of 2.9-3.4 s). Once the app is
built they are frozen out of later passes and the collector runs as usual for the server's
lifetime. Standard library and Prefect's own dependencies only.
"""

from __future__ import annotations

import gc
import sys


def main() -> None:
    """Serve the API on 127.0.0.1, on the port given as the only argument."""
    port = int(sys.argv[1])
    gc.disable()
    import uvicorn
    from prefect.server.api.server import create_app

    app = create_app()
    gc.freeze()
    gc.enable()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")


if __name__ == "__main__":
    main()
