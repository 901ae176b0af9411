//! Test hooks, apart from the production code: [`fault_hooks`] raises a signal or loses the
//! device at a chosen step (the reliability tests drive them through environment variables).

pub mod fault_hooks;
