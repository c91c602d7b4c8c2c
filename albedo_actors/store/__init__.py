"""The store of credentials, saved catalogues, OAuth client registrations and tool trust (peewee lives here only).

::

    store = open_store(home)            # SQLite at home/albedo.db, or $ALBEDO_DATABASE_URL;
                                        # secrets sealed under $ALBEDO_STORE_KEY(_FILE) when set
    store.put_credentials("docs", Credentials(bearer_token=token))
    store.update_credentials("docs", lambda c: dataclasses.replace(c, env={...}))
    store.save_catalogue("docs", fingerprint, "2026-07-28", catalogue)
    store.close()
"""

from .records import Credentials, SavedCatalogue, ServerState, TaskRecord
from .store import MAX_CATALOGUE_BYTES, Store, open_store

__all__ = ["open_store", "Store", "Credentials", "SavedCatalogue", "ServerState", "TaskRecord", "MAX_CATALOGUE_BYTES"]
