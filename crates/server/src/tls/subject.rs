//! The subject common name (CN) of an X.509 certificate, read from its DER bytes: the user name
//! SASL EXTERNAL logs in as. RabbitMQ's `ssl_cert_login_from = common_name`: every CN of the
//! subject, in order, joined with "," (rabbit_ssl `peer_cert_auth_name`).
//!
//! Only the path to the subject is walked (Certificate → TBSCertificate → skip version, serial,
//! signature, issuer, validity → subject → RDNs → attributes); the certificate has already been
//! verified by webpki, but every length is still checked: malformed bytes give `None`, never a
//! panic.

/// DER tags on the way to the subject.
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// `[0] EXPLICIT Version` in TBSCertificate (absent in a v1 certificate).
const VERSION_TAG: u8 = 0xA0;
/// id-at-commonName, 2.5.4.3.
const COMMON_NAME_OID: &[u8] = &[0x55, 0x04, 0x03];
/// Directory string types a CN may use.
const UTF8_STRING: u8 = 0x0C;
const PRINTABLE_STRING: u8 = 0x13;
const TELETEX_STRING: u8 = 0x14;
const IA5_STRING: u8 = 0x16;
const UNIVERSAL_STRING: u8 = 0x1C;
const BMP_STRING: u8 = 0x1E;

/// The subject's CNs joined with ",", or `None` when the subject has none (or the bytes are not
/// a certificate).
pub fn common_name(certificate_der: &[u8]) -> Option<String> {
    let (certificate, _) = element(certificate_der, SEQUENCE)?;
    let (mut tbs, _) = element(certificate, SEQUENCE)?;
    if tbs.first() == Some(&VERSION_TAG) {
        tbs = any_element(tbs)?.1;
    }
    // serialNumber, signature, issuer, validity.
    for _ in 0..4 {
        tbs = any_element(tbs)?.1;
    }
    let (mut subject, _) = element(tbs, SEQUENCE)?;
    let mut names = Vec::new();
    while !subject.is_empty() {
        let (mut rdn, rest) = element(subject, SET)?;
        subject = rest;
        while !rdn.is_empty() {
            let (attribute, rest) = element(rdn, SEQUENCE)?;
            rdn = rest;
            let (oid, value) = element(attribute, OID)?;
            if oid == COMMON_NAME_OID {
                names.push(directory_string(value)?);
            }
        }
    }
    (!names.is_empty()).then(|| names.join(","))
}

/// A DirectoryString's text; `None` for a type a name cannot be read from.
fn directory_string(value: &[u8]) -> Option<String> {
    let (&tag, _) = value.split_first()?;
    let (bytes, _) = element(value, tag)?;
    match tag {
        UTF8_STRING | PRINTABLE_STRING | IA5_STRING | TELETEX_STRING => {
            std::str::from_utf8(bytes).ok().map(str::to_owned)
        }
        BMP_STRING if bytes.len() % 2 == 0 => {
            let units = bytes.chunks_exact(2).map(|pair| u16::from_be_bytes([pair[0], pair[1]]));
            char::decode_utf16(units).collect::<Result<String, _>>().ok()
        }
        UNIVERSAL_STRING if bytes.len() % 4 == 0 => bytes
            .chunks_exact(4)
            .map(|quad| char::from_u32(u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]])))
            .collect(),
        _ => None,
    }
}

/// The contents of the element at the start of `der` if its tag is `tag`, and what follows it.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match der.first() {
        Some(&found) if found == tag => any_element(der),
        _ => None,
    }
}

/// The contents of the element at the start of `der` (any tag), and what follows it. DER
/// lengths: short form (< 128), or long form with 1 to 4 length octets.
fn any_element(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = der.get(1..).and_then(|r| r.split_first())?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7F);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let length = rest[..octets].iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (length, &rest[octets..])
    };
    (rest.len() >= length).then(|| rest.split_at(length))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal TBS-shaped certificate around `subject` (the walker skips what it does not read).
    fn certificate_with_subject(subject: &[u8]) -> Vec<u8> {
        let skipped = [0x02, 0x01, 0x01, 0x30, 0x00, 0x30, 0x00, 0x30, 0x00];
        let mut tbs = vec![0xA0, 0x03, 0x02, 0x01, 0x02];
        tbs.extend_from_slice(&skipped);
        tbs.extend_from_slice(subject);
        let tbs = wrap(SEQUENCE, &tbs);
        wrap(SEQUENCE, &tbs)
    }

    fn wrap(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag, contents.len() as u8];
        out.extend_from_slice(contents);
        out
    }

    fn attribute(oid: &[u8], tag: u8, text: &[u8]) -> Vec<u8> {
        let mut contents = wrap(OID, oid);
        contents.extend(wrap(tag, text));
        wrap(SET, &wrap(SEQUENCE, &contents))
    }

    /// The CN is found among other attributes; several CNs are joined with "," as RabbitMQ
    /// does; a subject without a CN gives none.
    #[test]
    fn common_names_of_the_subject() {
        let org = attribute(&[0x55, 0x04, 0x0A], UTF8_STRING, b"Example");
        let mut subject = org.clone();
        subject.extend(attribute(COMMON_NAME_OID, UTF8_STRING, b"alice"));
        assert_eq!(common_name(&certificate_with_subject(&wrap(SEQUENCE, &subject))), Some("alice".into()));
        subject.extend(attribute(COMMON_NAME_OID, PRINTABLE_STRING, b"bob"));
        assert_eq!(
            common_name(&certificate_with_subject(&wrap(SEQUENCE, &subject))),
            Some("alice,bob".into())
        );
        assert_eq!(common_name(&certificate_with_subject(&wrap(SEQUENCE, &org))), None);
        let bmp = attribute(COMMON_NAME_OID, BMP_STRING, &[0x00, 0x63, 0x00, 0xE9]);
        assert_eq!(common_name(&certificate_with_subject(&wrap(SEQUENCE, &bmp))), Some("cé".into()));
    }

    /// Truncated or garbage bytes give none, at every cut, without a panic.
    #[test]
    fn malformed_bytes_give_none() {
        let subject = wrap(SEQUENCE, &attribute(COMMON_NAME_OID, UTF8_STRING, b"alice"));
        let der = certificate_with_subject(&subject);
        for cut in 0..der.len() {
            assert_eq!(common_name(&der[..cut]), None, "cut at {cut}");
        }
        assert_eq!(common_name(&[0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF]), None);
        assert_eq!(common_name(&[0x30, 0x80]), None);
    }
}
