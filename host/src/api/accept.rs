//! The `Accept` header read as RFC 9110 (section 12.5.1) reads it: media
//! ranges with parameters and q-values, the most specific range deciding
//! each offer's weight. A handler lists what it can answer (`Offer`s, its
//! default first) and `choose` picks one, or says that none is acceptable.
//!
//! Rules beyond the RFC's letter, for the result endpoints' sake:
//! - no `Accept` header, or an empty one, is the default offer;
//! - an offer is reached by wildcards (`*/*`, `type/*`) only when it says so,
//!   so a client sending `*/*` never gets a whole-result download it did not
//!   name;
//! - a parameter is significant only where some offer of that media type
//!   names it (`types` of `application/json`): `application/json;
//!   charset=utf-8` is plain JSON, `application/json; types=native` is not;
//! - ranges that do not parse (no `/`, a bad `q`) are skipped.

use axum::http::{HeaderMap, header};

/// One answer a handler can give, by its media type.
#[derive(Debug, Clone, Copy)]
pub struct Offer<T> {
    /// `type/subtype`, lower case.
    pub media_type: &'static str,
    /// Parameters the range must carry with these values (lower case).
    pub params: &'static [(&'static str, &'static str)],
    /// Whether `*/*` and `type/*` reach it.
    pub by_wildcard: bool,
    pub value: T,
}

/// One media range of the header.
#[derive(Debug, PartialEq)]
struct MediaRange {
    main: String,
    sub: String,
    params: Vec<(String, String)>,
    q: f32,
}

fn parse_range(text: &str) -> Option<MediaRange> {
    let mut parts = text.split(';');
    let (main, sub) = parts.next()?.trim().split_once('/')?;
    let (main, sub) = (
        main.trim().to_ascii_lowercase(),
        sub.trim().to_ascii_lowercase(),
    );
    if main.is_empty() || sub.is_empty() || (main == "*" && sub != "*") {
        return None;
    }
    let mut params = Vec::new();
    let mut q = 1.0;
    for param in parts {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim().trim_matches('"').to_ascii_lowercase();
        if name == "q" {
            q = value
                .parse::<f32>()
                .ok()
                .filter(|q| (0.0..=1.0).contains(q))?;
        } else {
            params.push((name, value));
        }
    }
    Some(MediaRange {
        main,
        sub,
        params,
        q,
    })
}

/// The media ranges of every `Accept` header; `None` when there is none or
/// it is blank.
fn ranges(headers: &HeaderMap) -> Option<Vec<MediaRange>> {
    let mut text = String::new();
    for value in headers.get_all(header::ACCEPT) {
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(&String::from_utf8_lossy(value.as_bytes()));
    }
    if text.trim().is_empty() {
        return None;
    }
    Some(text.split(',').filter_map(parse_range).collect())
}

/// How specifically `range` names `offer` (higher is more specific), or
/// `None` when it does not. `significant`: the parameter names that tell
/// offers of this media type apart.
fn specificity<T>(range: &MediaRange, offer: &Offer<T>, significant: &[&str]) -> Option<u8> {
    let (main, sub) = offer.media_type.split_once('/').expect("type/subtype");
    match (range.main.as_str(), range.sub.as_str()) {
        ("*", "*") => offer.by_wildcard.then_some(0),
        (m, "*") if m == main => offer.by_wildcard.then_some(1),
        (m, s) if m == main && s == sub => {
            let value_of = |params: &[(String, String)], name: &str| {
                params
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            };
            let same = significant.iter().all(|name| {
                let wanted = offer
                    .params
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.to_string());
                value_of(&range.params, name) == wanted
            });
            same.then_some(2 + u8::from(!offer.params.is_empty()))
        }
        _ => None,
    }
}

/// The offer the `Accept` header prefers: the highest q-value, then the most
/// specific range, then the handler's order. `None`: the header accepts none.
pub fn choose<T: Copy>(headers: &HeaderMap, offers: &[Offer<T>]) -> Option<T> {
    let Some(ranges) = ranges(headers) else {
        return offers.first().map(|offer| offer.value);
    };
    let mut best: Option<(f32, u8, T)> = None;
    for offer in offers {
        let significant: Vec<&str> = offers
            .iter()
            .filter(|other| other.media_type == offer.media_type)
            .flat_map(|other| other.params.iter().map(|(name, _)| *name))
            .collect();
        // The most specific matching range decides the offer's q-value.
        let mut decided: Option<(u8, f32)> = None;
        for range in &ranges {
            if let Some(level) = specificity(range, offer, &significant)
                && decided.is_none_or(|(best_level, _)| level > best_level)
            {
                decided = Some((level, range.q));
            }
        }
        if let Some((level, q)) = decided
            && q > 0.0
            && best.is_none_or(|(best_q, best_level, _)| {
                q > best_q || (q == best_q && level > best_level)
            })
        {
            best = Some((q, level, offer.value));
        }
    }
    best.map(|(_, _, value)| value)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Answer {
        Json,
        Native,
        Csv,
        Parquet,
    }

    const OFFERS: &[Offer<Answer>] = &[
        Offer {
            media_type: "application/json",
            params: &[],
            by_wildcard: true,
            value: Answer::Json,
        },
        Offer {
            media_type: "application/json",
            params: &[("types", "native")],
            by_wildcard: false,
            value: Answer::Native,
        },
        Offer {
            media_type: "text/csv",
            params: &[],
            by_wildcard: false,
            value: Answer::Csv,
        },
        Offer {
            media_type: "application/vnd.apache.parquet",
            params: &[],
            by_wildcard: false,
            value: Answer::Parquet,
        },
    ];

    fn chosen(accept: &[&str]) -> Option<Answer> {
        let mut headers = HeaderMap::new();
        for value in accept {
            headers.append(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        choose(&headers, OFFERS)
    }

    #[test]
    fn the_default_answers_no_header_and_wildcards() {
        for accept in [
            &[][..],
            &[""],
            &["*/*"],
            &["application/*"],
            &["application/json"],
            &["Application/JSON; charset=utf-8"],
            &["text/html,application/xhtml+xml,*/*;q=0.8"],
            &["application/json, text/plain, */*"],
        ] {
            assert_eq!(chosen(accept), Some(Answer::Json), "{accept:?}");
        }
    }

    #[test]
    fn named_types_and_parameters_choose_their_offer() {
        assert_eq!(
            chosen(&["application/json; types=native"]),
            Some(Answer::Native)
        );
        assert_eq!(
            chosen(&["application/json;types=\"native\";charset=utf-8"]),
            Some(Answer::Native)
        );
        assert_eq!(
            chosen(&["application/json, application/json; types=native"]),
            Some(Answer::Native),
            "the more specific range wins a tie"
        );
        assert_eq!(
            chosen(&["application/json; types=native;q=0.5, application/json"]),
            Some(Answer::Json)
        );
        assert_eq!(
            chosen(&["application/vnd.apache.parquet, */*"]),
            Some(Answer::Parquet)
        );
        assert_eq!(
            chosen(&["application/vnd.apache.parquet;q=0.1", "application/json"]),
            Some(Answer::Json),
            "headers given twice are one list"
        );
        assert_eq!(chosen(&["text/csv; header=present"]), Some(Answer::Csv));
    }

    #[test]
    fn nothing_acceptable_is_none() {
        for accept in [
            &["text/html"][..],
            &["text/*"],
            &["application/json; types=strings"],
            &["application/json;q=0"],
            &["*/*;q=0"],
            &["application/json;q=0, */*"],
            &["not a media type"],
            &["application/json;q=2"],
            &["application/vnd.apache.arrow.file"],
        ] {
            assert_eq!(chosen(accept), None, "{accept:?}");
        }
    }
}
