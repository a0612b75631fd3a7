//! Authentication of a replication connection by the cluster's shared secret
//! (`--cluster-secret-file`; docs/clustering.md "Security model"), sans-IO: messages in, messages
//! and keys out, nonces given by the caller. The link (`link.rs`) and the receiver
//! (`receiver.rs`) move the messages; `frame.rs` encodes them and seals every later frame.
//!
//! ```text
//! leader (dials)                                   follower (listens)
//!   Hello{term, leader, follower, nonce_l}   ──►
//!                                           ◄──   Challenge{nonce_f, proof_f}
//!   Proof{proof_l}                           ──►
//!   then every frame, both ways: seq:u64 ‖ frame ‖ HMAC(k_direction, seq ‖ frame)
//!
//! transcript = VERSION ‖ nonce_l ‖ nonce_f ‖ str(leader) ‖ str(follower) ‖ term
//! proof_f = HMAC(secret, "follower proof" ‖ transcript)   the follower holds the secret
//! proof_l = HMAC(secret, "leader proof" ‖ transcript)     the leader holds the secret
//! k_l2f   = HMAC(secret, "leader to follower" ‖ transcript), k_f2l likewise
//! ```
//!
//! Each side proves it holds the secret over a nonce the other has just drawn, so a recorded
//! handshake replayed to either side fails; the labels differ per role, so neither proof can be
//! reflected back as the other. The secret never crosses the wire. Frame keys are fresh per
//! connection (both nonces) and per direction, and the sequence number each side counts is in the
//! MAC: a frame replayed, reordered, dropped or spliced in from another connection is refused.
//! Nothing here encrypts: without `--replication-tls` the stream is authenticated, not secret.

use std::io;
use std::path::{Path, PathBuf};

use ring::hmac;
use ring::rand::SecureRandom;

/// Bytes of each side's nonce: 256 bits, never repeated in practice.
pub const NONCE_BYTES: usize = 32;
/// Bytes of an HMAC-SHA256 tag.
pub const TAG_BYTES: usize = 32;
/// Bytes of sequence number in front of every sealed frame.
pub const SEQ_BYTES: usize = 8;
/// The shortest secret accepted, after trimming: 128 bits, if it is random (the suggested
/// command makes 32 random bytes, 44 in base64).
pub const SECRET_BYTES_MIN: usize = 16;
/// The longest node name in a handshake: keeps an unauthenticated hello small
/// (`frame::HANDSHAKE_FRAME_BYTES_MAX`); the config refuses longer names.
pub const NAME_BYTES_MAX: usize = 255;
/// How to make a secret, for the start-up errors.
pub const MAKE_SECRET: &str = "head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE";

/// The protocol's name and version, first in every transcript.
const VERSION: &[u8] = b"hourglass-replication-auth-v1";
const LABEL_FOLLOWER_PROOF: &[u8] = b"follower proof";
const LABEL_LEADER_PROOF: &[u8] = b"leader proof";
const LABEL_LEADER_TO_FOLLOWER: &[u8] = b"leader to follower";
const LABEL_FOLLOWER_TO_LEADER: &[u8] = b"follower to leader";

/// The cluster's shared secret as an HMAC key (the bytes themselves are not kept).
#[derive(Clone)]
pub struct ClusterSecret {
    key: hmac::Key,
}

impl ClusterSecret {
    /// The secret is the bytes given, without surrounding whitespace (a trailing newline).
    pub fn from_bytes(raw: &[u8]) -> Result<ClusterSecret, SecretError> {
        let secret = raw.trim_ascii();
        if secret.len() < SECRET_BYTES_MIN {
            return Err(SecretError::TooShort { bytes: secret.len() });
        }
        Ok(ClusterSecret { key: hmac::Key::new(hmac::HMAC_SHA256, secret) })
    }

    /// Reads the secret file (`--cluster-secret-file`).
    pub fn read(path: &Path) -> Result<ClusterSecret, SecretFileError> {
        let error = |reason| SecretFileError { path: path.to_owned(), reason };
        let raw = std::fs::read(path).map_err(|e| error(SecretError::Unreadable(e)))?;
        ClusterSecret::from_bytes(&raw).map_err(error)
    }

    fn sign(&self, label: &[u8], transcript: &[u8]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.key);
        context.update(label);
        context.update(transcript);
        context.sign()
    }

    /// Constant-time check of `tag` against HMAC(secret, label ‖ transcript).
    fn verify(&self, label: &[u8], transcript: &[u8], tag: &[u8; TAG_BYTES]) -> bool {
        hmac::verify(&self.key, &[label, transcript].concat(), tag).is_ok()
    }

    fn derive(&self, label: &[u8], transcript: &[u8]) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, self.sign(label, transcript).as_ref())
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

/// Why a secret is refused.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read it: {0}")]
    Unreadable(io::Error),
    #[error(
        "it holds {bytes} bytes after trimming, fewer than {SECRET_BYTES_MIN}; make one with `{MAKE_SECRET}`"
    )]
    TooShort { bytes: usize },
}

/// A refused secret file, named.
#[derive(Debug, thiserror::Error)]
#[error("the cluster secret file {}: {reason}", path.display())]
pub struct SecretFileError {
    pub path: PathBuf,
    /// Not `source`: the message already says it, and `{:#}` would say it twice.
    pub reason: SecretError,
}

/// A nonce drawn for one handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_BYTES]);

impl Nonce {
    /// A fresh nonce from `rng` (the node uses `ring::rand::SystemRandom`).
    pub fn random(rng: &dyn SecureRandom) -> Result<Nonce, AuthError> {
        let mut bytes = [0u8; NONCE_BYTES];
        rng.fill(&mut bytes).map_err(|_| AuthError::NoRandomness)?;
        Ok(Nonce(bytes))
    }
}

/// Leader → follower, first: who leads at which term, whom it means, its nonce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub term: u64,
    pub leader: String,
    pub follower: String,
    pub nonce: Nonce,
}

/// Follower → leader: its nonce and its proof over both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub nonce: Nonce,
    pub proof: [u8; TAG_BYTES],
}

/// Leader → follower: the leader's proof over both nonces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proof {
    pub proof: [u8; TAG_BYTES],
}

/// Why a handshake or a sealed frame is refused. Every one ends the connection.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the hello is meant for node {addressed:?}, and this is {me:?}")]
    WrongFollower { addressed: String, me: String },
    #[error("a node name in the hello is empty or longer than {NAME_BYTES_MAX} bytes")]
    BadName,
    #[error("the follower's proof does not match: it does not hold this cluster's secret")]
    FollowerProofMismatch,
    #[error("the leader's proof does not match: it does not hold this cluster's secret, or it replays an old handshake")]
    LeaderProofMismatch,
    #[error("the system's random number generator failed")]
    NoRandomness,
    #[error("sealed frame {got} arrived where {expected} was due: replayed, reordered or dropped")]
    FrameOutOfOrder { expected: u64, got: u64 },
    #[error("sealed frame {seq}'s tag does not match: altered, or from another connection or direction")]
    FrameTagMismatch { seq: u64 },
    #[error("a sealed frame of {bytes} bytes is shorter than its sequence number and tag")]
    FrameTooShort { bytes: usize },
}

/// The leader's side, waiting for the follower's challenge.
pub struct LeaderAwaitingChallenge {
    secret: ClusterSecret,
    hello: Hello,
}

impl LeaderAwaitingChallenge {
    /// Starts the handshake of `leader` at `term` with `follower`: the hello to send.
    pub fn start(
        secret: &ClusterSecret,
        leader: &str,
        follower: &str,
        term: u64,
        nonce: Nonce,
    ) -> Result<(LeaderAwaitingChallenge, Hello), AuthError> {
        check_name(leader)?;
        check_name(follower)?;
        let hello = Hello { term, leader: leader.to_owned(), follower: follower.to_owned(), nonce };
        Ok((LeaderAwaitingChallenge { secret: secret.clone(), hello: hello.clone() }, hello))
    }

    /// Checks the follower's proof; the leader's proof to send and the connection's keys.
    pub fn handle_challenge(self, challenge: &Challenge) -> Result<(Proof, SessionKeys), AuthError> {
        let transcript = transcript(&self.hello, &challenge.nonce);
        if !self.secret.verify(LABEL_FOLLOWER_PROOF, &transcript, &challenge.proof) {
            return Err(AuthError::FollowerProofMismatch);
        }
        let proof = tag_bytes(&self.secret.sign(LABEL_LEADER_PROOF, &transcript));
        let keys = SessionKeys {
            seal: Sealer::new(self.secret.derive(LABEL_LEADER_TO_FOLLOWER, &transcript)),
            open: Opener::new(self.secret.derive(LABEL_FOLLOWER_TO_LEADER, &transcript)),
        };
        Ok((Proof { proof }, keys))
    }
}

/// The follower's side, having answered a hello, waiting for the leader's proof.
pub struct FollowerAwaitingProof {
    secret: ClusterSecret,
    hello: Hello,
    transcript: Vec<u8>,
}

impl FollowerAwaitingProof {
    /// Answers `hello` as node `me` with a fresh `nonce`: the challenge to send. The follower's
    /// proof gives nothing away: it is keyed by the secret and labelled for the follower's role.
    pub fn handle_hello(
        secret: &ClusterSecret,
        me: &str,
        hello: Hello,
        nonce: Nonce,
    ) -> Result<(FollowerAwaitingProof, Challenge), AuthError> {
        check_name(&hello.leader)?;
        check_name(&hello.follower)?;
        if hello.follower != me {
            return Err(AuthError::WrongFollower { addressed: hello.follower, me: me.to_owned() });
        }
        let transcript = transcript(&hello, &nonce);
        let proof = tag_bytes(&secret.sign(LABEL_FOLLOWER_PROOF, &transcript));
        let waiting = FollowerAwaitingProof { secret: secret.clone(), hello, transcript };
        Ok((waiting, Challenge { nonce, proof }))
    }

    /// Checks the leader's proof: who leads at which term, now proven, and the keys.
    pub fn handle_proof(self, proof: &Proof) -> Result<Authenticated, AuthError> {
        if !self.secret.verify(LABEL_LEADER_PROOF, &self.transcript, &proof.proof) {
            return Err(AuthError::LeaderProofMismatch);
        }
        let keys = SessionKeys {
            seal: Sealer::new(self.secret.derive(LABEL_FOLLOWER_TO_LEADER, &self.transcript)),
            open: Opener::new(self.secret.derive(LABEL_LEADER_TO_FOLLOWER, &self.transcript)),
        };
        Ok(Authenticated { leader: self.hello.leader, term: self.hello.term, keys })
    }
}

/// A follower's handshake that succeeded.
#[derive(Debug)]
pub struct Authenticated {
    pub leader: String,
    pub term: u64,
    pub keys: SessionKeys,
}

/// One connection's keys: for the frames this side sends, and for those it receives.
#[derive(Debug)]
pub struct SessionKeys {
    pub seal: Sealer,
    pub open: Opener,
}

/// Seals the frames one side sends, numbering them from 0.
pub struct Sealer {
    key: hmac::Key,
    next_seq: u64,
}

impl Sealer {
    fn new(key: hmac::Key) -> Sealer {
        Sealer { key, next_seq: 0 }
    }

    /// `record` is room for the sequence number followed by the frame: writes the next sequence
    /// number into its first [`SEQ_BYTES`]; the tag to append.
    pub fn seal(&mut self, record: &mut [u8]) -> [u8; TAG_BYTES] {
        assert!(record.len() > SEQ_BYTES, "a sealed record holds a sequence number and a frame");
        record[..SEQ_BYTES].copy_from_slice(&self.next_seq.to_be_bytes());
        self.next_seq += 1;
        tag_bytes(&hmac::sign(&self.key, record))
    }
}

/// Opens the frames one side receives, expecting them numbered from 0 with none missing.
pub struct Opener {
    key: hmac::Key,
    next_seq: u64,
}

impl Opener {
    fn new(key: hmac::Key) -> Opener {
        Opener { key, next_seq: 0 }
    }

    /// `sealed` is `seq ‖ frame ‖ tag`: the frame, if the tag is this direction's over `seq ‖
    /// frame` and `seq` is the next one due.
    pub fn open<'a>(&mut self, sealed: &'a [u8]) -> Result<&'a [u8], AuthError> {
        if sealed.len() <= SEQ_BYTES + TAG_BYTES {
            return Err(AuthError::FrameTooShort { bytes: sealed.len() });
        }
        let (record, tag) = sealed.split_at(sealed.len() - TAG_BYTES);
        let mut seq = [0u8; SEQ_BYTES];
        seq.copy_from_slice(&record[..SEQ_BYTES]);
        let seq = u64::from_be_bytes(seq);
        hmac::verify(&self.key, record, tag).map_err(|_| AuthError::FrameTagMismatch { seq })?;
        if seq != self.next_seq {
            return Err(AuthError::FrameOutOfOrder { expected: self.next_seq, got: seq });
        }
        self.next_seq += 1;
        Ok(&record[SEQ_BYTES..])
    }
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("next_seq", &self.next_seq).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener").field("next_seq", &self.next_seq).finish_non_exhaustive()
    }
}

fn check_name(name: &str) -> Result<(), AuthError> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(AuthError::BadName);
    }
    Ok(())
}

/// Both nonces, both names (length-prefixed, so no two pairs encode alike) and the term.
fn transcript(hello: &Hello, follower_nonce: &Nonce) -> Vec<u8> {
    let mut out = Vec::with_capacity(VERSION.len() + 2 * NONCE_BYTES + 2 * (2 + NAME_BYTES_MAX) + 8);
    out.extend_from_slice(VERSION);
    out.extend_from_slice(&hello.nonce.0);
    out.extend_from_slice(&follower_nonce.0);
    for name in [&hello.leader, &hello.follower] {
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
    }
    out.extend_from_slice(&hello.term.to_be_bytes());
    out
}

fn tag_bytes(tag: &hmac::Tag) -> [u8; TAG_BYTES] {
    let mut bytes = [0u8; TAG_BYTES];
    // HMAC-SHA256 tags are always 32 bytes.
    bytes.copy_from_slice(tag.as_ref());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> ClusterSecret {
        ClusterSecret::from_bytes(text.as_bytes()).unwrap()
    }

    fn nonce(byte: u8) -> Nonce {
        Nonce([byte; NONCE_BYTES])
    }

    /// Runs a handshake: the leader's keys, the follower's result, and the messages sent.
    fn handshake(
        leader_secret: &ClusterSecret,
        follower_secret: &ClusterSecret,
        nonces: (u8, u8),
    ) -> (Result<(Proof, SessionKeys), AuthError>, Hello, Challenge) {
        let (leader, hello) =
            LeaderAwaitingChallenge::start(leader_secret, "n1", "n2", 7, nonce(nonces.0)).unwrap();
        let (_, challenge) =
            FollowerAwaitingProof::handle_hello(follower_secret, "n2", hello.clone(), nonce(nonces.1))
                .unwrap();
        (leader.handle_challenge(&challenge), hello, challenge)
    }

    /// Seals `frame` as the frame writer does.
    fn seal(sealer: &mut Sealer, frame: &[u8]) -> Vec<u8> {
        let mut record = vec![0u8; SEQ_BYTES];
        record.extend_from_slice(frame);
        let tag = sealer.seal(&mut record);
        record.extend_from_slice(&tag);
        record
    }

    fn connected() -> (SessionKeys, Authenticated) {
        let s = secret("a shared secret of the cluster");
        let (leader, hello) = LeaderAwaitingChallenge::start(&s, "n1", "n2", 7, nonce(1)).unwrap();
        let (follower, challenge) = FollowerAwaitingProof::handle_hello(&s, "n2", hello, nonce(2)).unwrap();
        let (proof, leader_keys) = leader.handle_challenge(&challenge).unwrap();
        (leader_keys, follower.handle_proof(&proof).unwrap())
    }

    /// With the same secret both sides prove themselves, the follower learns the proven leader
    /// and term, and frames flow both ways.
    #[test]
    fn the_right_secret_authenticates_both_sides_and_frames_flow_both_ways() {
        let (mut leader, mut follower) = connected();
        assert_eq!((follower.leader.as_str(), follower.term), ("n1", 7));
        for frame in [&b"op one"[..], b"op two"] {
            let sealed = seal(&mut leader.seal, frame);
            assert_eq!(follower.keys.open.open(&sealed).unwrap(), frame);
        }
        let ack = seal(&mut follower.keys.seal, b"ack");
        assert_eq!(leader.open.open(&ack).unwrap(), b"ack");
    }

    /// A follower without the secret is caught by the leader; a leader without it (one that
    /// ignores the follower's proof and answers with its own) is caught by the follower.
    #[test]
    fn a_wrong_secret_fails_on_either_side_with_its_own_error() {
        let (right, wrong) = (secret("a shared secret of the cluster"), secret("a guess at the secret"));
        let (leader_result, _, _) = handshake(&right, &wrong, (1, 2));
        assert_eq!(leader_result.err(), Some(AuthError::FollowerProofMismatch));

        let (_, hello) = LeaderAwaitingChallenge::start(&wrong, "n1", "n2", 7, nonce(1)).unwrap();
        let (follower, challenge) =
            FollowerAwaitingProof::handle_hello(&right, "n2", hello.clone(), nonce(2)).unwrap();
        let forged = FollowerAwaitingProof::handle_hello(&wrong, "n2", hello, challenge.nonce).unwrap().0;
        let forged_proof = Proof { proof: tag_bytes(&wrong.sign(LABEL_LEADER_PROOF, &forged.transcript)) };
        assert_eq!(follower.handle_proof(&forged_proof).err(), Some(AuthError::LeaderProofMismatch));
    }

    /// A recorded handshake replayed to a follower fails on the follower's fresh nonce; a
    /// recorded challenge replayed to a leader fails on the leader's.
    #[test]
    fn a_replayed_handshake_fails_on_the_fresh_nonce() {
        let s = secret("a shared secret of the cluster");
        let (leader, hello) = LeaderAwaitingChallenge::start(&s, "n1", "n2", 7, nonce(1)).unwrap();
        let (_, challenge) = FollowerAwaitingProof::handle_hello(&s, "n2", hello.clone(), nonce(2)).unwrap();
        let (recorded_proof, _) = leader.handle_challenge(&challenge).unwrap();

        let (follower, _) = FollowerAwaitingProof::handle_hello(&s, "n2", hello, nonce(3)).unwrap();
        assert_eq!(follower.handle_proof(&recorded_proof).err(), Some(AuthError::LeaderProofMismatch));
        let (leader, _) = LeaderAwaitingChallenge::start(&s, "n1", "n2", 7, nonce(4)).unwrap();
        assert_eq!(leader.handle_challenge(&challenge).err(), Some(AuthError::FollowerProofMismatch));
    }

    /// The follower's own proof, reflected back as the leader's, is refused (the labels differ).
    #[test]
    fn a_reflected_proof_is_refused() {
        let s = secret("a shared secret of the cluster");
        let (_, hello) = LeaderAwaitingChallenge::start(&s, "n1", "n2", 7, nonce(1)).unwrap();
        let (follower, challenge) = FollowerAwaitingProof::handle_hello(&s, "n2", hello, nonce(2)).unwrap();
        let reflected = Proof { proof: challenge.proof };
        assert_eq!(follower.handle_proof(&reflected).err(), Some(AuthError::LeaderProofMismatch));
    }

    /// A hello addressed to another node, or with an oversized name, is refused before any proof.
    #[test]
    fn a_hello_for_another_node_or_with_a_bad_name_is_refused() {
        let s = secret("a shared secret of the cluster");
        let (_, hello) = LeaderAwaitingChallenge::start(&s, "n1", "n3", 7, nonce(1)).unwrap();
        let refused = FollowerAwaitingProof::handle_hello(&s, "n2", hello.clone(), nonce(2)).err();
        assert_eq!(refused, Some(AuthError::WrongFollower { addressed: "n3".into(), me: "n2".into() }));
        let long = Hello { leader: "x".repeat(NAME_BYTES_MAX + 1), ..hello };
        assert_eq!(
            FollowerAwaitingProof::handle_hello(&s, "n3", long, nonce(2)).err(),
            Some(AuthError::BadName)
        );
    }

    /// After the handshake a frame with one bit flipped, a frame sent twice, two frames swapped
    /// and a frame of another connection or of the other direction are all refused.
    #[test]
    fn tampered_replayed_reordered_or_spliced_frames_are_refused() {
        let (mut leader, mut follower) = connected();
        let first = seal(&mut leader.seal, b"remove messages/1.seg");
        let second = seal(&mut leader.seal, b"write catalog.log");
        let mut tampered = first.clone();
        tampered[SEQ_BYTES + 1] ^= 1;
        assert_eq!(follower.keys.open.open(&tampered), Err(AuthError::FrameTagMismatch { seq: 0 }));
        assert_eq!(follower.keys.open.open(&second), Err(AuthError::FrameOutOfOrder { expected: 0, got: 1 }));
        assert_eq!(follower.keys.open.open(&first).unwrap(), b"remove messages/1.seg");
        assert_eq!(follower.keys.open.open(&first), Err(AuthError::FrameOutOfOrder { expected: 1, got: 0 }));
        assert!(follower.keys.open.open(&second).is_ok());

        let (mut other_leader, _) = connected_with_nonces(5, 6);
        let spliced = seal(&mut other_leader.seal, b"from another connection");
        assert!(matches!(follower.keys.open.open(&spliced), Err(AuthError::FrameTagMismatch { .. })));
        let reflected = seal(&mut follower.keys.seal, b"ack");
        assert!(matches!(follower.keys.open.open(&reflected), Err(AuthError::FrameTagMismatch { .. })));
        assert_eq!(follower.keys.open.open(&[0; 40]), Err(AuthError::FrameTooShort { bytes: 40 }));
    }

    fn connected_with_nonces(l: u8, f: u8) -> (SessionKeys, Authenticated) {
        let s = secret("a shared secret of the cluster");
        let (leader, hello) = LeaderAwaitingChallenge::start(&s, "n1", "n2", 7, nonce(l)).unwrap();
        let (follower, challenge) = FollowerAwaitingProof::handle_hello(&s, "n2", hello, nonce(f)).unwrap();
        let (proof, keys) = leader.handle_challenge(&challenge).unwrap();
        (keys, follower.handle_proof(&proof).unwrap())
    }

    /// The secret is the file's bytes without surrounding whitespace; under 16 bytes, or an
    /// unreadable file, is refused with the reason and the path.
    #[test]
    fn secrets_are_trimmed_and_short_or_unreadable_ones_refused() {
        let padded = ClusterSecret::from_bytes(b"  0123456789abcdef\n").unwrap();
        let plain = secret("0123456789abcdef");
        assert_eq!(padded.sign(b"x", b"y").as_ref(), plain.sign(b"x", b"y").as_ref());
        assert!(matches!(ClusterSecret::from_bytes(b"short\n"), Err(SecretError::TooShort { bytes: 5 })));
        let error = ClusterSecret::read(Path::new("/nonexistent/secret")).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/secret") && error.contains("cannot read"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("secret");
        std::fs::write(&short, "tiny\n").unwrap();
        let error = ClusterSecret::read(&short).unwrap_err().to_string();
        assert!(error.contains("4 bytes") && error.contains("head -c 32 /dev/urandom"), "{error}");
    }

    /// Two nonces drawn from the system's generator differ.
    #[test]
    fn nonces_are_fresh() {
        let rng = ring::rand::SystemRandom::new();
        assert_ne!(Nonce::random(&rng).unwrap(), Nonce::random(&rng).unwrap());
    }
}
