//! User-facing arch specs (`7.5,8.9,9.0+PTX`, `Hopper`, `9.0a`) → a build plan.
