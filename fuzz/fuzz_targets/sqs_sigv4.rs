//! Fuzzes the SQS endpoint's Signature V4 canonicalisation (issue 37): any method, path, query,
//! headers and body, as an HTTP parser could hand them over, are signed as an SDK signs them
//! (`sigv4::authorization`) and checked as the endpoint checks them (`parse`, `verify`). Beyond
//! "no panic": a request verifies with its own secret, or is refused as malformed (a query that
//! does not percent-decode); it never verifies with another secret, with one byte of its body
//! changed, or with another body and an `x-amz-content-sha256` header naming the signed one's
//! hash; a credential scoped to another service never parses.
#![no_main]

use hourglass_sqs::sigv4::{self, Request, SignatureError};
use libfuzzer_sys::fuzz_target;

/// 2026-12-01T12:00:00Z.
const NOW_MS: u64 = 1_796_126_400_000;
const AMZ_DATE: &str = "20261201T120000Z";

/// The input's fields, split at 0xFF bytes: method, path, query, host, body, then header names
/// and values in turn. Text fields keep their valid UTF-8 only.
fn fields(data: &[u8]) -> Vec<&[u8]> {
    data.split(|b| *b == 0xFF).collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().filter(|c| !c.is_control()).collect()
}

/// A header name as HTTP allows it: a token.
fn token(bytes: &[u8]) -> String {
    bytes.iter().filter(|b| b.is_ascii_alphanumeric() || **b == b'-').map(|b| *b as char).collect()
}

fuzz_target!(|data: &[u8]| {
    let parts = fields(data);
    let get = |i: usize| parts.get(i).copied().unwrap_or_default();
    let method = token(get(0));
    let method = if method.is_empty() { "POST".to_owned() } else { method };
    let (path, query, host, body) = (text(get(1)), text(get(2)), text(get(3)), get(4).to_vec());
    let mut headers: Vec<(String, String)> =
        vec![("host".into(), host), ("x-amz-date".into(), AMZ_DATE.into())];
    for pair in parts.get(5..).unwrap_or_default().chunks(2).take(16) {
        let name = token(pair[0]);
        let reserved = ["host", "x-amz-date", "authorization"].iter().any(|r| name.eq_ignore_ascii_case(r));
        if !name.is_empty() && !reserved {
            headers.push((name, text(pair.get(1).copied().unwrap_or_default())));
        }
    }
    let unsigned = Request { method: &method, path: &path, query: &query, headers: &headers, body: &body };
    let authorization = sigv4::authorization(&unsigned, "AKID", "secret", "us-east-1", AMZ_DATE);
    let mut signed_headers = headers.clone();
    signed_headers.push(("authorization".into(), authorization.clone()));
    let request = Request { headers: &signed_headers, ..unsigned };
    let claimed = match sigv4::parse(&request) {
        Ok(claimed) => claimed,
        // What cannot be canonicalised (a query that does not percent-decode) is not signed.
        Err(SignatureError::Malformed(_)) if authorization.ends_with("Signature=") => return,
        Err(error) => panic!("an SDK-signed request did not parse: {error:?}"),
    };
    match sigv4::verify(&request, &claimed, "secret", NOW_MS) {
        Ok(()) => {}
        Err(SignatureError::Malformed(_)) => return,
        Err(other) => panic!("an SDK-signed request was refused: {other:?}"),
    }
    assert_eq!(sigv4::verify(&request, &claimed, "Secret", NOW_MS), Err(SignatureError::Mismatch));
    let mut changed = body.clone();
    match changed.first_mut() {
        Some(first) => *first ^= 1,
        None => changed.push(b'x'),
    }
    let hash = sigv4::hex(&sigv4::sha256(&body));
    let mut claiming = signed_headers.clone();
    claiming.push(("x-amz-content-sha256".into(), hash));
    for replay in
        [Request { body: &changed, ..request }, Request { body: &changed, headers: &claiming, ..request }]
    {
        assert_eq!(sigv4::verify(&replay, &claimed, "secret", NOW_MS), Err(SignatureError::Mismatch));
    }
    let rescoped = authorization.replace("/sqs/aws4_request", "/s3/aws4_request");
    let mut other_service = headers.clone();
    other_service.push(("authorization".into(), rescoped));
    assert_eq!(
        sigv4::parse(&Request { headers: &other_service, ..unsigned }),
        Err(SignatureError::WrongService)
    );
});
