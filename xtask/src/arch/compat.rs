//! Binary compatibility: which compiled image a device loads, or why none.
