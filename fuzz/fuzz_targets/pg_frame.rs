//! The `pg_frame` target of `lakehost::fuzzing::TARGETS`, under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let parse = lakehost::fuzzing::target("pg_frame").expect("a target of lakehost::fuzzing");
    parse(data);
});
