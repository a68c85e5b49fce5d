//! The `form_policy` target of `lakehost::fuzzing::TARGETS`, under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let parse = lakehost::fuzzing::target("form_policy").expect("a target of lakehost::fuzzing");
    parse(data);
});
