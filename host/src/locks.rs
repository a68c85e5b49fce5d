//! A `std::sync::Mutex` locked whether or not an earlier holder panicked.
//!
//! lakehost's std mutexes guard counts, maps and buffers that every holder
//! changes in one step, so a panic while one is held leaves a value that
//! is still whole: going on with it is right, and turning the poison into a
//! second panic in every later caller is not. A mutex whose holder could
//! leave its value half-changed is not locked through here.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex`, locked; a poisoned one is taken as it is.
pub fn locked<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutex_poisoned_by_a_panicking_holder_is_still_locked() {
        let mutex = Mutex::new(vec![1]);
        let panicked = std::panic::catch_unwind(|| {
            let mut held = mutex.lock().unwrap();
            held.push(2);
            panic!("a holder panics");
        });
        assert!(panicked.is_err());
        assert!(mutex.is_poisoned());
        assert_eq!(*locked(&mutex), vec![1, 2]);
    }
}
