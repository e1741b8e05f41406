//! Integration tests of kiln as an outside crate uses it (see `tests/`).
