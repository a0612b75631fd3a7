//! hourglass-store
