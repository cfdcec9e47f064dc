// Found before the system's sqlite3.h when ui/ is compiled (see ui/CMakeLists.txt).
#error \
    "ui/ reaches the runs database only through core's RunStore (store/run_store.h), never SQLite"
