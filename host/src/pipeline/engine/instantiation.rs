//! A step's instance in a fresh store, with the one failure of the host's
//! kernel that a second try cures: on Linux wasmtime writes a component's
//! memory image (its data segments) to a memfd at its first instantiation
//! and seals it, and the kernel can refuse the seal (EBUSY) while pages just
//! written are still held elsewhere for a moment. wasmtime keeps no image on
//! that failure, so a later try in a new store builds it again; any other
//! failure is the step's, at once.
//!
//! Seen in CI: a Python step (a large image) ended a load with
//! "step py_guard trapped: cannot add seals to the memfd".

use std::time::Duration;

use wasmtime::Store;

/// Tries after the first when the kernel would not seal a memory image.
const SEAL_RETRIES: u32 = 4;

/// The wait before the nth retry is n times this.
const SEAL_RETRY_BACKOFF: Duration = Duration::from_millis(50);

/// A store from `sandbox` and what `instantiate` made in it; when the
/// kernel would not seal the memory image, again in a new store, up to
/// `SEAL_RETRIES` more times.
pub(super) fn instantiate_in_fresh_store<S, I>(
    mut sandbox: impl FnMut() -> Store<S>,
    mut instantiate: impl FnMut(&mut Store<S>) -> wasmtime::Result<I>,
) -> (Store<S>, wasmtime::Result<I>) {
    let mut retry = 0;
    loop {
        let mut store = sandbox();
        let instance = instantiate(&mut store);
        match &instance {
            Err(error) if retry < SEAL_RETRIES && kernel_refused_the_seal(error) => {
                retry += 1;
                tracing::warn!(retry, "{error:#}: instantiating the step again");
                std::thread::sleep(SEAL_RETRY_BACKOFF * retry);
            }
            _ => return (store, instance),
        }
    }
}

#[cfg(target_os = "linux")]
fn kernel_refused_the_seal(error: &wasmtime::Error) -> bool {
    matches!(
        error.downcast_ref::<memfd::Error>(),
        Some(memfd::Error::AddSeals(_))
    )
}

#[cfg(not(target_os = "linux"))]
fn kernel_refused_the_seal(_: &wasmtime::Error) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io;

    use wasmtime::{Engine, Store};

    use super::*;

    fn refused_seal() -> wasmtime::Error {
        wasmtime::Error::from(memfd::Error::AddSeals(io::Error::from_raw_os_error(16)))
            .context("instantiating a component")
    }

    /// Instantiates with `outcomes` in turn; the stores made and what came back.
    fn tries(outcomes: Vec<wasmtime::Result<u32>>) -> (u32, wasmtime::Result<u32>) {
        let engine = Engine::default();
        let stores = std::cell::Cell::new(0);
        let mut outcomes = outcomes.into_iter();
        let (store, instance) = instantiate_in_fresh_store(
            || {
                stores.set(stores.get() + 1);
                Store::new(&engine, stores.get())
            },
            |store| {
                assert_eq!(*store.data(), stores.get(), "each try has a new store");
                outcomes.next().expect("no more tries than outcomes")
            },
        );
        assert_eq!(
            *store.data(),
            stores.get(),
            "the last try's store comes back"
        );
        (stores.get(), instance)
    }

    #[test]
    fn a_refused_seal_is_tried_again_in_a_new_store() {
        let (stores, instance) = tries(vec![Err(refused_seal()), Err(refused_seal()), Ok(7)]);
        assert_eq!(stores, 3);
        assert_eq!(instance.unwrap(), 7);
    }

    #[test]
    fn a_seal_refused_every_time_is_the_error_after_the_last_retry() {
        let outcomes = (0..=SEAL_RETRIES).map(|_| Err(refused_seal())).collect();
        let (stores, instance) = tries(outcomes);
        assert_eq!(stores, SEAL_RETRIES + 1);
        let error = instance.unwrap_err();
        assert!(
            format!("{error:#}").contains("cannot add seals"),
            "{error:#}"
        );
    }

    #[test]
    fn any_other_failure_is_not_tried_again() {
        let other = [
            wasmtime::Error::msg("unreachable executed"),
            wasmtime::Error::from(memfd::Error::Create(io::Error::from_raw_os_error(24))),
        ];
        for error in other {
            let (stores, instance) = tries(vec![Err(error)]);
            assert_eq!(stores, 1);
            assert!(instance.is_err());
        }
    }
}
