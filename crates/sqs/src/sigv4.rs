//! AWS Signature Version 4, checked as AWS checks it (issue 26): the `Authorization` header or
//! the `X-Amz-*` query parameters, the canonical request over the signed headers and the
//! payload's SHA-256 (always computed from the body received: an unsigned header that claims a
//! hash is never believed), the signing key derived from the secret, the date and the
//! credential's scope (which must name the service `sqs`), and a request time within 15 minutes of
//! the broker's clock.
//!
//! Two steps, so the caller can look the access key up in between: [`parse`] reads what the
//! request claims (no secret needed, nothing trusted yet), [`verify`] checks it with the secret.
//! Pure: the clock is passed in.

use hourglass_broker::calendar::{civil_from_days, days_from_civil};
use ring::{digest, hmac};

/// The one algorithm SigV4 names.
const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// The service a credential's scope must name: a signature made for another service (`s3`,
/// `iam`) is refused, as AWS refuses it.
const SERVICE: &str = "sqs";
/// How far a request's time may be from the broker's, either way (AWS: 15 minutes).
pub const CLOCK_SKEW_MS: u64 = 15 * 60 * 1000;
/// The longest `X-Amz-Expires` of a pre-signed URL (AWS: 7 days).
const PRESIGNED_EXPIRES_MAX_S: u64 = 7 * 24 * 3600;
/// Headers a signature may name: more than any SDK signs, and a bound on the work.
const SIGNED_HEADERS_MAX: usize = 64;

/// The request as received: method, the path and query as they were on the wire (still
/// percent-encoded), the headers and the body.
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    /// Header names in any case; values as received.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

impl Request<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// What a request claims about its signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub access_key: String,
    /// `YYYYMMDD` of the credential scope.
    pub scope_date: String,
    pub region: String,
    pub service: String,
    /// `YYYYMMDDTHHMMSSZ`.
    pub amz_date: String,
    /// Lower-case, in the order given (SigV4 requires them sorted; checked by the signature).
    pub signed_headers: Vec<String>,
    pub signature: Vec<u8>,
    /// Signed in the query string (a pre-signed URL), valid for this many seconds.
    pub presigned_for_s: Option<u64>,
}

/// Why a request's signature is refused, in AWS's terms.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `Authorization` header and no `X-Amz-Signature`.
    #[error("Request is missing Authentication Token")]
    Missing,
    /// Present, but not SigV4 as AWS writes it.
    #[error("{0}")]
    Malformed(String),
    /// The access key is unknown (the caller decides this between [`parse`] and [`verify`]).
    #[error("The security token included in the request is invalid.")]
    UnknownAccessKey,
    #[error("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")]
    Mismatch,
    /// The credential's scope names another service than `sqs` (AWS's text).
    #[error("Credential should be scoped to correct service: '{SERVICE}'. ")]
    WrongService,
    /// The request's time is more than 15 minutes from the broker's, or a pre-signed URL ran out.
    #[error("Signature expired: {amz_date} is now earlier or later than the 15-minute window around the server's time.")]
    Expired { amz_date: String },
}

/// Reads the signature a request claims, from its `Authorization` header or its query string.
pub fn parse(request: &Request<'_>) -> Result<Claimed, SignatureError> {
    if let Some(header) = request.header("authorization") {
        return parse_header(request, header);
    }
    let query = query_pairs(request.query)?;
    if query.iter().any(|(k, _)| k == "X-Amz-Signature") {
        return parse_query(&query);
    }
    Err(SignatureError::Missing)
}

fn malformed(why: impl Into<String>) -> SignatureError {
    SignatureError::Malformed(why.into())
}

fn parse_header(request: &Request<'_>, header: &str) -> Result<Claimed, SignatureError> {
    let rest = header
        .strip_prefix(ALGORITHM)
        .filter(|r| r.starts_with(' '))
        .ok_or_else(|| malformed(format!("Unsupported authorization type: only {ALGORITHM} is accepted")))?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (key, value) = part
            .trim()
            .split_once('=')
            .ok_or_else(|| malformed("Authorization header requires key=value pairs"))?;
        match key {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed = Some(value),
            "Signature" => signature = Some(value),
            _ => {}
        }
    }
    let missing = |name: &str| malformed(format!("Authorization header requires '{name}' parameter."));
    let amz_date = request.header("x-amz-date").ok_or_else(|| {
        malformed("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
    })?;
    claimed(
        credential.ok_or_else(|| missing("Credential"))?,
        signed.ok_or_else(|| missing("SignedHeaders"))?,
        signature.ok_or_else(|| missing("Signature"))?,
        amz_date,
        None,
    )
}

fn parse_query(query: &[(String, String)]) -> Result<Claimed, SignatureError> {
    let get = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| malformed(format!("AWS query-string parameters must include '{name}'.")))
    };
    if get("X-Amz-Algorithm")? != ALGORITHM {
        return Err(malformed(format!("X-Amz-Algorithm only supports '{ALGORITHM}'")));
    }
    let expires: u64 = get("X-Amz-Expires")?
        .parse()
        .ok()
        .filter(|s| *s <= PRESIGNED_EXPIRES_MAX_S)
        .ok_or_else(|| malformed("X-Amz-Expires must be a number of seconds up to 604800"))?;
    claimed(
        get("X-Amz-Credential")?,
        get("X-Amz-SignedHeaders")?,
        get("X-Amz-Signature")?,
        get("X-Amz-Date")?,
        Some(expires),
    )
}

fn claimed(
    credential: &str,
    signed: &str,
    signature: &str,
    amz_date: &str,
    presigned_for_s: Option<u64>,
) -> Result<Claimed, SignatureError> {
    let parts: Vec<&str> = credential.split('/').collect();
    let [access_key, scope_date, region, service, "aws4_request"] = parts.as_slice() else {
        return Err(malformed(format!(
            "Credential should be scoped to a valid region, and the terminating 'aws4_request': {credential}"
        )));
    };
    if *service != SERVICE {
        return Err(SignatureError::WrongService);
    }
    let signed_headers: Vec<String> = signed.split(';').map(str::to_owned).collect();
    if signed_headers.len() > SIGNED_HEADERS_MAX || signed_headers.iter().any(|h| h.is_empty()) {
        return Err(malformed("SignedHeaders must name between 1 and 64 headers"));
    }
    if !signed_headers.iter().any(|h| h == "host") {
        return Err(malformed("'Host' must be a signed header"));
    }
    let signature = hex_decode(signature)
        .filter(|s| s.len() == 32)
        .ok_or_else(|| malformed("Signature must be 64 hex digits"))?;
    if epoch_ms_of(amz_date).is_none() {
        return Err(malformed(format!("X-Amz-Date must be YYYYMMDDTHHMMSSZ: {amz_date}")));
    }
    if !amz_date.starts_with(scope_date) {
        return Err(malformed(format!("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{scope_date}' != '{}'", &amz_date[..8])));
    }
    Ok(Claimed {
        access_key: (*access_key).to_owned(),
        scope_date: (*scope_date).to_owned(),
        region: (*region).to_owned(),
        service: (*service).to_owned(),
        amz_date: amz_date.to_owned(),
        signed_headers,
        signature,
        presigned_for_s,
    })
}

/// Checks `claimed` (from [`parse`] of the same request) with the access key's `secret`, at the
/// broker's time `now_ms` (Unix epoch milliseconds).
pub fn verify(
    request: &Request<'_>,
    claimed: &Claimed,
    secret: &str,
    now_ms: u64,
) -> Result<(), SignatureError> {
    let signed_at = epoch_ms_of(&claimed.amz_date).ok_or_else(|| malformed("bad X-Amz-Date"))?;
    let expired = || SignatureError::Expired { amz_date: claimed.amz_date.clone() };
    match claimed.presigned_for_s {
        None if signed_at.abs_diff(now_ms) > CLOCK_SKEW_MS => return Err(expired()),
        Some(seconds) if now_ms > signed_at + seconds * 1000 || signed_at > now_ms + CLOCK_SKEW_MS => {
            return Err(expired())
        }
        _ => {}
    }
    let to_sign = string_to_sign(request, claimed)?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, &signing_key(claimed, secret));
    // `hmac::verify` compares in constant time: a comparison that stopped at the first differing
    // byte would tell a guesser how much of a signature it has right.
    hmac::verify(&key, to_sign.as_bytes(), &claimed.signature).map_err(|_| SignatureError::Mismatch)
}

/// SigV4's string to sign: the algorithm, the time, the scope and the canonical request's hash.
fn string_to_sign(request: &Request<'_>, claimed: &Claimed) -> Result<String, SignatureError> {
    let canonical = canonical_request(request, claimed)?;
    let scope = format!("{}/{}/{}/aws4_request", claimed.scope_date, claimed.region, claimed.service);
    Ok(format!("{ALGORITHM}\n{}\n{scope}\n{}", claimed.amz_date, hex(&sha256(canonical.as_bytes()))))
}

/// The signing key: the secret through the scope's date, region and service.
fn signing_key(claimed: &Claimed, secret: &str) -> Vec<u8> {
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), claimed.scope_date.as_bytes());
    for part in [claimed.region.as_bytes(), claimed.service.as_bytes(), b"aws4_request"] {
        key = hmac_sha256(&key, part);
    }
    key
}

/// The `Authorization` header that signs `request` (with `x-amz-date` = `amz_date` and `host`
/// among its headers, both signed with every other header it has) for `access_key` / `secret`:
/// what an SDK sends, for tests and tools that talk to the endpoint without one.
pub fn authorization(
    request: &Request<'_>,
    access_key: &str,
    secret: &str,
    region: &str,
    amz_date: &str,
) -> String {
    authorization_for(request, (access_key, secret), region, SERVICE, amz_date)
}

/// [`authorization`] for another service's scope (what a signature made for S3 or IAM looks
/// like, for tests of its refusal).
pub fn authorization_for(
    request: &Request<'_>,
    (access_key, secret): (&str, &str),
    region: &str,
    service: &str,
    amz_date: &str,
) -> String {
    let mut signed_headers: Vec<String> =
        request.headers.iter().map(|(name, _)| name.to_ascii_lowercase()).collect();
    signed_headers.sort();
    signed_headers.dedup();
    let claimed = Claimed {
        access_key: access_key.to_owned(),
        scope_date: amz_date.get(..8).unwrap_or_default().to_owned(),
        region: region.to_owned(),
        service: service.to_owned(),
        amz_date: amz_date.to_owned(),
        signed_headers,
        signature: Vec::new(),
        presigned_for_s: None,
    };
    let signature = string_to_sign(request, &claimed)
        .map(|to_sign| hmac_sha256(&signing_key(&claimed, secret), to_sign.as_bytes()))
        .unwrap_or_default();
    format!(
        "{ALGORITHM} Credential={access_key}/{}/{region}/{service}/aws4_request, SignedHeaders={}, Signature={}",
        claimed.scope_date,
        claimed.signed_headers.join(";"),
        hex(&signature)
    )
}

/// SigV4's canonical request: method, the path encoded again (as for every service but S3),
/// the query sorted and encoded (without the signature itself), the signed headers, and the
/// payload's hash.
fn canonical_request(request: &Request<'_>, claimed: &Claimed) -> Result<String, SignatureError> {
    let mut query: Vec<(String, String)> = query_pairs(request.query)?
        .into_iter()
        .filter(|(k, _)| !(claimed.presigned_for_s.is_some() && k == "X-Amz-Signature"))
        .map(|(k, v)| (uri_encode(&k, true), uri_encode(&v, true)))
        .collect();
    query.sort();
    let query: Vec<String> = query.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut headers = String::new();
    for name in &claimed.signed_headers {
        let values: Vec<&str> = request
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        if values.is_empty() {
            return Err(malformed(format!("signed header '{name}' is not in the request")));
        }
        let values: Vec<String> =
            values.iter().map(|v| v.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    // Pre-signed or not, every service but S3 signs the hash of the body, computed from the body
    // itself (botocore does too). An `x-amz-content-sha256` header is S3's and never believed:
    // taking the hash from it let a captured signature authorise any other body (issue 37).
    let payload = hex(&sha256(request.body));
    let path = if request.path.is_empty() { "/" } else { request.path };
    Ok(format!(
        "{}\n{}\n{}\n{headers}\n{}\n{payload}",
        request.method,
        uri_encode(path, false),
        query.join("&"),
        claimed.signed_headers.join(";"),
    ))
}

/// The query string's pairs, percent-decoded, in their order.
fn query_pairs(query: &str) -> Result<Vec<(String, String)>, SignatureError> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

/// `%XX` and `+` (a space, in a query) decoded; a bad escape or bytes that are not UTF-8 refused.
pub fn percent_decode(s: &str) -> Result<String, SignatureError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| malformed("bad percent escape"))?;
                out.push(byte);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| malformed("percent escapes that are not UTF-8"))
}

/// RFC 3986 encoding as SigV4 wants it: unreserved characters as they are, every other byte as
/// `%XX` (upper case); `/` kept when `slash_too` is false (a path).
fn uri_encode(s: &str, slash_too: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let unreserved = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~');
        if unreserved || (b == b'/' && !slash_too) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// SHA-256 of `data` (the payload hash SigV4 signs).
pub fn sha256(data: &[u8]) -> Vec<u8> {
    digest::digest(&digest::SHA256, data).as_ref().to_vec()
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data).as_ref().to_vec()
}

/// Lower-case hex, as SigV4 writes hashes and signatures.
pub fn hex(bytes: &[u8]) -> String {
    hourglass_broker::admin::lower_hex(bytes)
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// `YYYYMMDDTHHMMSSZ` as Unix epoch milliseconds.
pub fn epoch_ms_of(amz_date: &str) -> Option<u64> {
    let b = amz_date.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| amz_date.get(range)?.parse::<u64>().ok();
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year as i64, month as i64, day as i64);
    let seconds = u64::try_from(days).ok()? * 86_400 + hour * 3600 + minute * 60 + second;
    Some(seconds * 1000)
}

/// `YYYYMMDDTHHMMSSZ` of Unix epoch milliseconds (what a signer writes as `X-Amz-Date`).
pub fn amz_date_of(epoch_ms: u64) -> String {
    let seconds = epoch_ms / 1000;
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01T12:00:00Z, when botocore signed the requests below.
    const SIGNED_AT_MS: u64 = 1_796_126_400_000;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// A CreateQueue as boto3 1.43 (botocore's `SigV4Auth`) signs it with guest/guest.
    fn create_queue(headers: &[(String, String)]) -> Request<'_> {
        Request { method: "POST", path: "/", query: "", headers, body: br#"{"QueueName": "jobs"}"# }
    }

    fn signed_headers(signature: &str) -> Vec<(String, String)> {
        let authorization = format!("AWS4-HMAC-SHA256 Credential=guest/20261201/us-east-1/sqs/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature={signature}");
        headers(&[
            ("Host", "127.0.0.1:9324"),
            ("Content-Type", "application/x-amz-json-1.0"),
            ("X-Amz-Target", "AmazonSQS.CreateQueue"),
            ("X-Amz-Date", "20261201T120000Z"),
            ("Authorization", &authorization),
        ])
    }

    const BOTOCORE_SIGNATURE: &str = "68f01dacc3cedfd9ff893c1a8850c89652b4304ccf1141472eedd3cfaa25e62a";

    /// botocore's header signature checks out with the right secret, within the clock skew.
    #[test]
    fn a_botocore_header_signature_verifies() {
        let headers = signed_headers(BOTOCORE_SIGNATURE);
        let request = create_queue(&headers);
        let claimed = parse(&request).unwrap();
        assert_eq!(
            (claimed.access_key.as_str(), claimed.region.as_str(), claimed.service.as_str()),
            ("guest", "us-east-1", "sqs")
        );
        assert_eq!(verify(&request, &claimed, "guest", SIGNED_AT_MS), Ok(()));
        assert_eq!(verify(&request, &claimed, "guest", SIGNED_AT_MS + CLOCK_SKEW_MS), Ok(()));
        assert_eq!(verify(&request, &claimed, "guest", SIGNED_AT_MS - CLOCK_SKEW_MS), Ok(()));
    }

    /// A wrong secret, a changed body or header, or another signature is a mismatch; a time
    /// more than 15 minutes off either way is expired.
    #[test]
    fn anything_changed_is_a_mismatch_and_old_or_future_requests_expire() {
        let headers = signed_headers(BOTOCORE_SIGNATURE);
        let request = create_queue(&headers);
        let claimed = parse(&request).unwrap();
        assert_eq!(verify(&request, &claimed, "guesT", SIGNED_AT_MS), Err(SignatureError::Mismatch));
        let other_body = Request { body: br#"{"QueueName": "jobz"}"#, ..create_queue(&headers) };
        assert_eq!(verify(&other_body, &claimed, "guest", SIGNED_AT_MS), Err(SignatureError::Mismatch));
        let mut changed = headers.clone();
        changed[2].1 = "AmazonSQS.DeleteQueue".into();
        let changed_target = create_queue(&changed);
        assert_eq!(
            verify(&changed_target, &parse(&changed_target).unwrap(), "guest", SIGNED_AT_MS),
            Err(SignatureError::Mismatch)
        );
        let zeros = signed_headers(&"0".repeat(64));
        let zeroed = create_queue(&zeros);
        assert_eq!(
            verify(&zeroed, &parse(&zeroed).unwrap(), "guest", SIGNED_AT_MS),
            Err(SignatureError::Mismatch)
        );
        let expired = Err(SignatureError::Expired { amz_date: "20261201T120000Z".into() });
        assert_eq!(verify(&request, &claimed, "guest", SIGNED_AT_MS + CLOCK_SKEW_MS + 1), expired);
        assert_eq!(verify(&request, &claimed, "guest", SIGNED_AT_MS - CLOCK_SKEW_MS - 1), expired);
    }

    /// botocore's pre-signed URL (`SigV4QueryAuth`, 300 s) verifies, then runs out; an encoded
    /// path and query are canonicalised as AWS does.
    #[test]
    fn a_botocore_presigned_url_verifies_until_it_expires() {
        let headers = headers(&[("Host", "127.0.0.1:9324")]);
        let query = "Action=ListQueues&QueueNamePrefix=a%20b&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=guest%2F20261201%2Fus-east-1%2Fsqs%2Faws4_request&X-Amz-Date=20261201T120000Z&X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature=8bedeacb5c7d44d038ac29ab1405cf5bcd299970dcf2774cbaebb71796efa395";
        let request = Request { method: "GET", path: "/%2F/my%20queue", query, headers: &headers, body: b"" };
        let claimed = parse(&request).unwrap();
        assert_eq!(claimed.presigned_for_s, Some(300));
        assert_eq!(verify(&request, &claimed, "guest", SIGNED_AT_MS + 299_000), Ok(()));
        assert!(matches!(
            verify(&request, &claimed, "guest", SIGNED_AT_MS + 301_000),
            Err(SignatureError::Expired { .. })
        ));
    }

    /// A captured signature covers its own body only: an `x-amz-content-sha256` header naming
    /// the signed body's hash (S3's header, never signed by SQS SDKs) does not make another body
    /// pass, and is ignored where it is right (issue 37, finding 1).
    #[test]
    fn a_captured_signature_does_not_authorise_another_body() {
        let mut headers = signed_headers(BOTOCORE_SIGNATURE);
        let signed_hash = hex(&sha256(create_queue(&headers).body));
        headers.push(("x-amz-content-sha256".into(), signed_hash));
        let request = create_queue(&headers);
        let claimed = parse(&request).unwrap();
        assert_eq!(verify(&request, &claimed, "guest", SIGNED_AT_MS), Ok(()));
        let replayed = Request { body: br#"{"QueueUrl": "http://h/%2F/jobs"}"#, ..create_queue(&headers) };
        assert_eq!(verify(&replayed, &claimed, "guest", SIGNED_AT_MS), Err(SignatureError::Mismatch));
    }

    /// A pre-signed URL signs an empty body: sent with a body (and the empty body's well-known
    /// hash in `x-amz-content-sha256`), it is refused.
    #[test]
    fn a_presigned_url_does_not_authorise_a_body() {
        let empty_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let headers = headers(&[("Host", "127.0.0.1:9324"), ("x-amz-content-sha256", empty_hash)]);
        let query = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=guest%2F20261201%2Fus-east-1%2Fsqs%2Faws4_request&X-Amz-Date=20261201T120000Z&X-Amz-Expires=300&X-Amz-SignedHeaders=host";
        let unsigned = Request { method: "POST", path: "/", query, headers: &headers, body: b"" };
        let claimed = Claimed {
            access_key: "guest".into(),
            scope_date: "20261201".into(),
            region: "us-east-1".into(),
            service: "sqs".into(),
            amz_date: "20261201T120000Z".into(),
            signed_headers: vec!["host".into()],
            signature: Vec::new(),
            presigned_for_s: Some(300),
        };
        let to_sign = string_to_sign(&unsigned, &claimed).unwrap();
        let signature = hmac_sha256(&signing_key(&claimed, "guest"), to_sign.as_bytes());
        let signed_query = format!("{query}&X-Amz-Signature={}", hex(&signature));
        let empty = Request { query: &signed_query, ..unsigned };
        let claimed = parse(&empty).unwrap();
        assert_eq!(verify(&empty, &claimed, "guest", SIGNED_AT_MS), Ok(()));
        let with_body =
            Request { body: b"Action=DeleteQueue&QueueUrl=http%3A%2F%2Fh%2F%252F%2Fjobs", ..empty };
        assert_eq!(verify(&with_body, &claimed, "guest", SIGNED_AT_MS), Err(SignatureError::Mismatch));
    }

    /// A signature scoped to another service (S3, IAM) is refused before its secret is looked
    /// at, even when it is right for that service (issue 37, finding 8).
    #[test]
    fn a_signature_for_another_service_is_refused() {
        for service in ["s3", "iam", "SQS"] {
            let authorization = format!("AWS4-HMAC-SHA256 Credential=guest/20261201/us-east-1/{service}/aws4_request, SignedHeaders=host;x-amz-date, Signature={}", "0".repeat(64));
            let h = headers(&[
                ("Host", "h"),
                ("X-Amz-Date", "20261201T120000Z"),
                ("Authorization", &authorization),
            ]);
            assert_eq!(parse(&create_queue(&h)), Err(SignatureError::WrongService), "{service}");
        }
    }

    /// Malformed claims are named, not panicked over; no claim at all is `Missing`.
    #[test]
    fn malformed_claims_are_refused() {
        let none = headers(&[("Host", "h")]);
        assert_eq!(parse(&create_queue(&none)), Err(SignatureError::Missing));
        for authorization in [
            "AWS4-HMAC-SHA1 Credential=a/b/c/d/aws4_request, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20261201/r/sqs, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20261201/r/sqs/aws4_request, SignedHeaders=x-amz-date, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20261201/r/sqs/aws4_request, SignedHeaders=host, Signature=zz",
            "AWS4-HMAC-SHA256 Credential=a/20261130/r/sqs/aws4_request, SignedHeaders=host, Signature=0000000000000000000000000000000000000000000000000000000000000000",
            "AWS4-HMAC-SHA256 garbage",
        ] {
            let h = headers(&[("Host", "h"), ("X-Amz-Date", "20261201T120000Z"), ("Authorization", authorization)]);
            assert!(matches!(parse(&create_queue(&h)), Err(SignatureError::Malformed(_))), "{authorization}");
        }
    }

    /// `authorization` signs as botocore does: the same header for the same request.
    #[test]
    fn authorization_matches_botocore() {
        let headers = signed_headers(BOTOCORE_SIGNATURE);
        let unsigned: Vec<(String, String)> =
            headers.iter().filter(|(n, _)| n != "Authorization").cloned().collect();
        let signed =
            authorization(&create_queue(&unsigned), "guest", "guest", "us-east-1", "20261201T120000Z");
        assert_eq!(signed, headers[4].1);
    }

    /// Dates read and write back, over leap days and years.
    #[test]
    fn amz_dates_round_trip() {
        assert_eq!(epoch_ms_of("19700101T000000Z"), Some(0));
        assert_eq!(epoch_ms_of("20261201T120000Z"), Some(SIGNED_AT_MS));
        for ms in [0, 951_782_400_000, 1_709_164_800_000, SIGNED_AT_MS, 4_102_444_800_000] {
            assert_eq!(epoch_ms_of(&amz_date_of(ms)), Some(ms), "{}", amz_date_of(ms));
        }
        for bad in ["2026-12-01T12:00:00Z", "20261301T000000Z", "20261201T250000Z", ""] {
            assert_eq!(epoch_ms_of(bad), None, "{bad}");
        }
    }
}
