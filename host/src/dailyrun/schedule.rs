//! When a scheduled daily run is due: the latest time of the org's cron
//! schedule (UTC) at or before now, if it is at most `catch_up` ago. The
//! store makes each such slot start at most one execution; the scheduler asks
//! on every tick, so a slot missed while a run was RUNNING (or the server was
//! down) still starts once, as long as it is within `catch_up`.

use chrono::{DateTime, Duration, Utc};
use croner::Cron;

/// The slot due at `now`, if any.
pub fn due_slot(schedule: &Cron, now: DateTime<Utc>, catch_up: Duration) -> Option<DateTime<Utc>> {
    let slot = schedule.find_previous_occurrence(&now, true).ok()?;
    (now - slot <= catch_up).then_some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_slot_is_due_from_its_time_until_catch_up_ends() {
        let nightly: Cron = "0 2 * * *".parse().unwrap();
        let hour = Duration::hours(1);
        assert_eq!(due_slot(&nightly, at("2026-11-22T01:59:59Z"), hour), None);
        assert_eq!(
            due_slot(&nightly, at("2026-11-22T02:00:00Z"), hour),
            Some(at("2026-11-22T02:00:00Z"))
        );
        assert_eq!(
            due_slot(&nightly, at("2026-11-22T02:59:00Z"), hour),
            Some(at("2026-11-22T02:00:00Z"))
        );
        assert_eq!(due_slot(&nightly, at("2026-11-22T03:00:01Z"), hour), None);
        assert_eq!(
            due_slot(&nightly, at("2026-11-23T02:00:30Z"), hour),
            Some(at("2026-11-23T02:00:00Z"))
        );
    }
}
