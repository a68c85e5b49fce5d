//! The `manifest` target of `lakehost::fuzzing::TARGETS`, under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let parse = lakehost::fuzzing::target("manifest").expect("a target of lakehost::fuzzing");
    parse(data);
});
