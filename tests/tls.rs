//! TLS end to end over the real binary (docs/tls.md): AMQPS with server authentication, HTTPS
//! and Prometheus over TLS, client certificates and SASL EXTERNAL, a plaintext client on the TLS
//! port, certificate reload on SIGHUP, plain listeners switched off. Certificates are made here
//! with rcgen; the client is tokio-rustls with a raw AMQP handshake over the wire codec.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::RunningBroker;
use hourglass_wire::{
    encode_content, encode_method_frame, BasicGet, BasicPublish, ChannelOpen, ConnectionOpen,
    ConnectionStartOk, ConnectionTuneOk, EncodedProperties, FieldTable, FieldValue, Frame, FrameDecoder,
    LongStr, Method, QueueDeclare, ShortStr, PROTOCOL_HEADER,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// How long one step (a read, a handshake, a log line) may take.
const STEP: Duration = Duration::from_secs(10);

/// A test CA that signs server and client certificates, and a directory for the PEM files.
struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as DER and PEM.
struct Issued {
    der: CertificateDer<'static>,
    cert_pem: String,
    key: KeyPair,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("hourglass-tls-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Pki { dir, ca: ca(name) }
    }

    /// A server certificate for localhost and 127.0.0.1 with subject CN `common_name`.
    fn server(&self, common_name: &str) -> Issued {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        issue(params, &self.ca)
    }

    /// A client certificate with subject CN `common_name`.
    fn client(&self, common_name: &str) -> Issued {
        client_signed_by(common_name, &self.ca)
    }

    /// Writes `text` to `name` in the directory; returns its path as the broker's flags want it.
    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Writes the CA and a server certificate; returns the flags that turn TLS on with them.
    fn server_flags(&self, server: &Issued) -> Vec<String> {
        let cert = self.write("server.pem", &server.cert_pem);
        let key = self.write("server.key", &server.key.serialize_pem());
        let ca = self.write("ca.pem", &self.ca.pem());
        ["--tls-cert", &cert, "--tls-key", &key, "--tls-ca", &ca]
            .into_iter()
            .chain(["--amqps-port", "0", "--https-port", "0", "--metrics-tls-port", "0"])
            .map(str::to_owned)
            .collect()
    }

    /// A client that trusts this CA, with `identity` as its certificate if given.
    fn connector(&self, identity: Option<&Issued>) -> TlsConnector {
        connector(self.ca.der().clone(), identity)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, format!("Hourglass test CA {name}"));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn client_signed_by(common_name: &str, ca: &CertifiedIssuer<'static, KeyPair>) -> Issued {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    issue(params, ca)
}

fn issue(params: CertificateParams, ca: &CertifiedIssuer<'static, KeyPair>) -> Issued {
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    Issued { der: cert.der().clone(), cert_pem: cert.pem(), key }
}

fn connector(ca: CertificateDer<'static>, identity: Option<&Issued>) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some(issued) => {
            let key = PrivateKeyDer::try_from(issued.key.serialize_der()).unwrap();
            builder.with_client_auth_cert(vec![issued.der.clone()], key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    TlsConnector::from(Arc::new(config))
}

/// The TLS listeners' addresses from the start-up log: (AMQPS, HTTPS, metrics over TLS).
fn tls_addrs(broker: &RunningBroker) -> (SocketAddr, SocketAddr, SocketAddr) {
    let started = Instant::now();
    loop {
        if let Some(line) = broker.log_lines_with("amqps=").first() {
            let addr = |key| common::parse_addr(line, key).unwrap_or_else(|| panic!("{key} in {line}"));
            return (addr("amqps="), addr("https="), addr("metrics_tls="));
        }
        assert!(started.elapsed() < STEP, "no TLS listener line logged");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the broker has logged a line containing `text` `count` times.
fn wait_for_log(broker: &RunningBroker, text: &str, count: usize) {
    let started = Instant::now();
    while broker.log_lines_with(text).len() < count {
        assert!(started.elapsed() < STEP, "the broker did not log {text:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls_connect(connector: &TlsConnector, addr: SocketAddr) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    tokio::time::timeout(STEP, connector.connect(name, tcp)).await.expect("handshake in time")
}

/// Reads frames until a method (or a body: `Frame::Body`) arrives; None when the socket closes.
async fn next_frame<S: AsyncRead + Unpin>(socket: &mut S, input: &mut BytesMut) -> Option<Frame> {
    let mut decoder = FrameDecoder::new(131_072);
    loop {
        match decoder.decode(input) {
            Ok(Some(frame @ (Frame::Method { .. } | Frame::Body { .. }))) => return Some(frame),
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(error) => panic!("bad frame from the broker: {error:?}"),
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout(STEP, socket.read(&mut chunk)).await.expect("broker answers in time") {
            Ok(0) | Err(_) => return None,
            Ok(n) => input.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn next_method<S: AsyncRead + Unpin>(socket: &mut S, input: &mut BytesMut) -> Option<Method> {
    match next_frame(socket, input).await? {
        Frame::Method { method, .. } => Some(method),
        other => panic!("expected a method, got {other:?}"),
    }
}

async fn send<S: AsyncWrite + Unpin>(socket: &mut S, frames: &[(u16, Method)]) {
    let mut out = BytesMut::new();
    for (channel, method) in frames {
        encode_method_frame(*channel, method, &mut out);
    }
    socket.write_all(&out).await.unwrap();
    socket.flush().await.unwrap();
}

/// An AMQP client on any byte stream: the handshake, then channel 1.
struct Amqp<S> {
    socket: S,
    input: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Amqp<S> {
    /// Sends the protocol header; returns the client with the mechanisms connection.start offers.
    async fn start(mut socket: S) -> (Self, String) {
        socket.write_all(PROTOCOL_HEADER).await.unwrap();
        socket.flush().await.unwrap();
        let mut client = Amqp { socket, input: BytesMut::new() };
        match client.method().await {
            Some(Method::ConnectionStart(start)) => (client, start.mechanisms.as_str().into_owned()),
            other => panic!("expected connection.start, got {other:?}"),
        }
    }

    /// start-ok with `mechanism`; Ok after tune-ok, open "/" and channel.open on 1, else the
    /// method that refused (None: the socket closed).
    async fn login(mut self, mechanism: &str, response: &[u8]) -> Result<Self, Option<Method>> {
        let capabilities =
            FieldTable::from_entries([("authentication_failure_close", FieldValue::Bool(true))]);
        let start_ok = ConnectionStartOk {
            client_properties: FieldTable::from_entries([("capabilities", FieldValue::Table(capabilities))]),
            mechanism: ShortStr::try_from(mechanism).unwrap(),
            response: LongStr::from(response.to_vec()),
            locale: ShortStr::from_static("en_US"),
        };
        self.send(&[(0, start_ok.into())]).await;
        match self.method().await {
            Some(Method::ConnectionTune(_)) => {}
            other => return Err(other),
        }
        let tune_ok = ConnectionTuneOk { channel_max: 16, frame_max: 131_072, heartbeat: 0 };
        let open = ConnectionOpen { virtual_host: ShortStr::from_static("/") };
        self.send(&[(0, tune_ok.into()), (0, open.into()), (1, ChannelOpen {}.into())]).await;
        assert!(matches!(self.method().await, Some(Method::ConnectionOpenOk(_))));
        assert!(matches!(self.method().await, Some(Method::ChannelOpenOk(_))));
        Ok(self)
    }

    /// Declares `queue`, publishes `body` to it and takes it back with basic.get.
    async fn round_trip(&mut self, queue: &str, body: &[u8]) -> Vec<u8> {
        let queue = ShortStr::try_from(queue).unwrap();
        let declare = QueueDeclare { queue: queue.clone(), ..Default::default() };
        self.send(&[(1, declare.into())]).await;
        assert!(matches!(self.method().await, Some(Method::QueueDeclareOk(_))));
        let publish = Method::from(BasicPublish { routing_key: queue.clone(), ..Default::default() });
        let mut out = BytesMut::new();
        encode_content(1, &publish, &EncodedProperties::default(), body, 131_072, &mut out);
        encode_method_frame(1, &BasicGet { queue, no_ack: true }.into(), &mut out);
        self.socket.write_all(&out).await.unwrap();
        self.socket.flush().await.unwrap();
        assert!(matches!(self.method().await, Some(Method::BasicGetOk(_))));
        match next_frame(&mut self.socket, &mut self.input).await {
            Some(Frame::Body { payload, .. }) => payload.to_vec(),
            other => panic!("expected the body, got {other:?}"),
        }
    }

    async fn method(&mut self) -> Option<Method> {
        next_method(&mut self.socket, &mut self.input).await
    }

    async fn send(&mut self, frames: &[(u16, Method)]) {
        send(&mut self.socket, frames).await
    }
}

/// The status line and body of a GET over HTTPS (basic auth as guest).
async fn https_get(connector: &TlsConnector, addr: SocketAddr, path: &str) -> (u16, String) {
    let mut tls = tls_connect(connector, addr).await.expect("HTTPS handshake");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    // The server may close without close_notify after `Connection: close`; what arrived counts.
    let _ = tokio::time::timeout(STEP, tls.read_to_end(&mut response)).await.expect("HTTPS answer in time");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

/// Reads from a raw socket until it closes (bounded): what the server sent before closing.
async fn read_until_closed(socket: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout(STEP, socket.read(&mut chunk)).await.expect("the server closes in time") {
            Ok(0) | Err(_) => return received,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A client that checks the server's certificate against the CA publishes and gets a message
/// over AMQPS with PLAIN; the plain listener keeps working alongside.
#[tokio::test]
async fn amqps_with_server_authentication_carries_messages() {
    let pki = Pki::new("server-auth");
    let broker = RunningBroker::start_with(&strs(&pki.server_flags(&pki.server("localhost"))));
    let (amqps, _, _) = tls_addrs(&broker);
    let tls = tls_connect(&pki.connector(None), amqps).await.expect("handshake");
    let (client, mechanisms) = Amqp::start(tls).await;
    assert_eq!(mechanisms, "PLAIN AMQPLAIN", "no EXTERNAL without a client certificate");
    let mut client = client.login("PLAIN", b"\0guest\0guest").await.expect("login over TLS");
    assert_eq!(client.round_trip("over-tls", b"sealed").await, b"sealed");
    let (plain, _) = Amqp::start(TcpStream::connect(broker.amqp).await.unwrap()).await;
    let mut plain = plain.login("PLAIN", b"\0guest\0guest").await.expect("plain login");
    assert_eq!(plain.round_trip("over-tcp", b"open").await, b"open");
    assert_eq!(connection_logins(&broker).await, [("PLAIN".to_owned(), false), ("PLAIN".to_owned(), true)]);
    // Each connection is named, and shows the port, of the listener it came in on.
    let (_, body) = common::http(&broker, "GET", "/api/connections", "").await;
    let listed: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    for connection in listed.as_array().expect("a list") {
        let port = if connection["ssl"] == true { amqps.port() } else { broker.amqp.port() };
        assert_eq!(connection["port"], port, "{connection}");
        let name = connection["name"].as_str().unwrap_or_default();
        assert!(name.ends_with(&format!(":{port}")), "{name}");
    }
    let (_, body) = common::http(&broker, "GET", "/api/channels", "").await;
    assert!(body.contains(&format!(":{} (1)", amqps.port())), "the TLS connection's channel: {body}");
}

/// (auth_mechanism, ssl) of every connection in /api/connections, sorted.
async fn connection_logins(broker: &RunningBroker) -> Vec<(String, bool)> {
    let (status, body) = common::http(broker, "GET", "/api/connections", "").await;
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let mut logins: Vec<(String, bool)> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| (c["auth_mechanism"].as_str().unwrap_or("").to_owned(), c["ssl"].as_bool().unwrap_or(false)))
        .collect();
    logins.sort();
    logins
}

/// A client trusting another CA refuses the broker's certificate.
#[tokio::test]
async fn a_client_trusting_another_ca_refuses_the_server() {
    let pki = Pki::new("wrong-ca");
    let broker = RunningBroker::start_with(&strs(&pki.server_flags(&pki.server("localhost"))));
    let (amqps, _, _) = tls_addrs(&broker);
    let other = ca("other");
    assert!(tls_connect(&connector(other.der().clone(), None), amqps).await.is_err());
}

/// The management API answers over HTTPS and Prometheus over its TLS port.
#[tokio::test]
async fn https_serves_the_api_and_metrics_over_tls() {
    let pki = Pki::new("https");
    let broker = RunningBroker::start_with(&strs(&pki.server_flags(&pki.server("localhost"))));
    let (_, https, metrics_tls) = tls_addrs(&broker);
    let connector = pki.connector(None);
    let (status, body) = https_get(&connector, https, "/api/overview").await;
    assert_eq!(status, 200, "{body}");
    let overview: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let listeners: Vec<(String, u64)> = overview["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| (l["protocol"].as_str().unwrap_or("").to_owned(), l["port"].as_u64().unwrap_or(0)))
        .collect();
    assert!(listeners.contains(&("https".to_owned(), u64::from(https.port()))), "{listeners:?}");
    assert!(
        listeners.contains(&("https/prometheus".to_owned(), u64::from(metrics_tls.port()))),
        "{listeners:?}"
    );
    assert!(listeners.iter().any(|(p, _)| p == "amqp/ssl") && listeners.iter().any(|(p, _)| p == "amqp"));
    let (status, body) = https_get(&connector, metrics_tls, "/metrics").await;
    assert_eq!(status, 200);
    assert!(body.contains("rabbitmq_"), "{body}");
}

/// The SQS endpoint over TLS, with the certificate of the other TLS listeners (issue 26: "the
/// same TLS options as the other listeners"): a signed request over HTTPS is answered, and the
/// queue URLs it gives name https; plain HTTP on that port gets no answer.
#[tokio::test]
async fn the_sqs_endpoint_is_served_over_tls() {
    let pki = Pki::new("sqs");
    let port = common::sqs_wire::free_port();
    let mut flags = pki.server_flags(&pki.server("localhost"));
    flags.extend(["--sqs-tls-port".to_owned(), port.to_string()]);
    let _broker = RunningBroker::start_with(&strs(&flags));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let connector = pki.connector(None);
    let host = format!("localhost:{port}");
    let create = serde_json::json!({"QueueName": "over-tls"});
    let tls = tls_connect(&connector, addr).await.expect("a TLS handshake on the SQS TLS port");
    let (status, created) = common::sqs_wire::sqs_on(tls, &host, "CreateQueue", create).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["QueueUrl"], format!("https://{host}/%2F/over-tls"));
    let tls = tls_connect(&connector, addr).await.expect("a TLS handshake");
    let (status, listed) = common::sqs_wire::sqs_on(tls, &host, "ListQueues", serde_json::json!({})).await;
    assert_eq!((status, &listed["QueueUrls"][0]), (200, &created["QueueUrl"]), "{listed}");
    let (status, _) = common::sqs_wire::sqs(addr, "ListQueues", serde_json::json!({})).await;
    assert_eq!(status, 0, "plain HTTP is not served on the TLS port");
}

/// With peer verification and EXTERNAL on, a client certificate whose CN names a user logs in
/// without a password; EXTERNAL is listed only for a client with a certificate; a CN naming no
/// user is refused with 403; a client without a certificate still logs in with PLAIN.
#[tokio::test]
async fn external_logs_in_with_a_client_certificate() {
    let pki = Pki::new("external");
    let mut flags = pki.server_flags(&pki.server("localhost"));
    flags.extend(["--tls-verify-peer", "true", "--tls-external-auth", "true"].map(str::to_owned));
    let broker = RunningBroker::start_with(&strs(&flags));
    let (amqps, _, _) = tls_addrs(&broker);
    let guest = pki.client("guest");
    let tls = tls_connect(&pki.connector(Some(&guest)), amqps).await.expect("handshake with a certificate");
    let (client, mechanisms) = Amqp::start(tls).await;
    assert_eq!(mechanisms, "PLAIN AMQPLAIN EXTERNAL");
    let mut client = client.login("EXTERNAL", b"").await.expect("EXTERNAL login as guest");
    assert_eq!(client.round_trip("by-certificate", b"hello").await, b"hello");
    assert_eq!(connection_logins(&broker).await, [("EXTERNAL".to_owned(), true)]);

    let stranger = pki.client("nobody-here");
    let tls = tls_connect(&pki.connector(Some(&stranger)), amqps).await.expect("handshake");
    let (client, _) = Amqp::start(tls).await;
    match client.login("EXTERNAL", b"").await {
        Err(Some(Method::ConnectionClose(close))) => assert_eq!(close.reply_code, 403),
        Err(other) => panic!("expected 403, got {other:?}"),
        Ok(_) => panic!("a CN naming no user logged in"),
    }

    let tls = tls_connect(&pki.connector(None), amqps).await.expect("handshake without a certificate");
    let (client, mechanisms) = Amqp::start(tls).await;
    assert_eq!(mechanisms, "PLAIN AMQPLAIN");
    assert!(client.login("PLAIN", b"\0guest\0guest").await.is_ok());
}

/// With `fail_if_no_peer_cert`, a client without a certificate, or with one from another CA,
/// never reaches AMQP; one with a good certificate does.
#[tokio::test]
async fn fail_if_no_peer_cert_refuses_clients_without_a_good_certificate() {
    let pki = Pki::new("fail-if-no-cert");
    let mut flags = pki.server_flags(&pki.server("localhost"));
    flags.extend(["--tls-verify-peer", "true", "--tls-fail-if-no-peer-cert", "true"].map(str::to_owned));
    let broker = RunningBroker::start_with(&strs(&flags));
    let (amqps, _, _) = tls_addrs(&broker);
    let foreign = client_signed_by("guest", &ca("foreign"));
    for identity in [None, Some(&foreign)] {
        // TLS 1.3: the client's handshake may finish before the server checks its certificate;
        // the refusal then arrives as an alert on the first read.
        if let Ok(mut tls) = tls_connect(&pki.connector(identity), amqps).await {
            let _ = tls.write_all(PROTOCOL_HEADER).await;
            let _ = tls.flush().await;
            let mut input = BytesMut::new();
            let mut chunk = [0u8; 64];
            let read = tokio::time::timeout(STEP, tls.read(&mut chunk)).await.expect("refused in time");
            if let Ok(n) = read {
                input.extend_from_slice(&chunk[..n]);
            }
            assert!(input.is_empty(), "no AMQP for a client without a good certificate: {input:?}");
        }
    }
    let guest = pki.client("guest");
    let tls = tls_connect(&pki.connector(Some(&guest)), amqps).await.expect("handshake");
    let (client, _) = Amqp::start(tls).await;
    assert!(client.login("PLAIN", b"\0guest\0guest").await.is_ok());
}

/// A plaintext AMQP client on the AMQPS port, and plain HTTP on the HTTPS port, are refused: the
/// socket is closed at once with no AMQP or HTTP answer (at most a TLS alert record, type 21).
/// A TLS ClientHello on the plain AMQP port gets the AMQP header back, as before.
#[tokio::test]
async fn plaintext_on_the_tls_ports_is_refused_cleanly() {
    let pki = Pki::new("plaintext");
    let broker = RunningBroker::start_with(&strs(&pki.server_flags(&pki.server("localhost"))));
    let (amqps, https, _) = tls_addrs(&broker);
    for (addr, greeting) in
        [(amqps, &PROTOCOL_HEADER[..]), (https, &b"GET /api/overview HTTP/1.1\r\nHost: x\r\n\r\n"[..])]
    {
        let started = Instant::now();
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(greeting).await.unwrap();
        let answer = read_until_closed(&mut socket).await;
        assert!(answer.is_empty() || answer[0] == 21, "only a TLS alert may come back: {answer:?}");
        assert!(started.elapsed() < Duration::from_secs(4), "refused at once, not after a timeout");
    }
    // The first bytes of a TLS 1.2 ClientHello record.
    let mut socket = TcpStream::connect(broker.amqp).await.unwrap();
    socket.write_all(&[0x16, 0x03, 0x01, 0x00, 0xC8, 0x01, 0x00, 0x00, 0xC4, 0x03, 0x03]).await.unwrap();
    assert_eq!(read_until_closed(&mut socket).await, PROTOCOL_HEADER);
    // The broker is still serving TLS clients.
    let tls = tls_connect(&pki.connector(None), amqps).await.expect("handshake");
    assert!(Amqp::start(tls).await.0.login("PLAIN", b"\0guest\0guest").await.is_ok());
}

/// SIGHUP reloads the certificate: a new client sees the new one while a connection opened before
/// keeps working; a bad file on a later SIGHUP is logged and the last good certificate stays.
#[tokio::test]
async fn sighup_reloads_the_certificate_for_new_connections_only() {
    let pki = Pki::new("reload");
    let first = pki.server("first");
    let broker = RunningBroker::start_with(&strs(&pki.server_flags(&first)));
    let (amqps, _, _) = tls_addrs(&broker);
    let connector = pki.connector(None);
    let old = tls_connect(&connector, amqps).await.expect("handshake");
    assert_eq!(peer_certificate(&old), first.der);
    let mut old = Amqp::start(old).await.0.login("PLAIN", b"\0guest\0guest").await.expect("login");

    let second = pki.server("second");
    pki.server_flags(&second);
    hangup(&broker);
    wait_for_log(&broker, "TLS certificate reloaded", 1);
    let new = tls_connect(&connector, amqps).await.expect("handshake after reload");
    assert_eq!(peer_certificate(&new), second.der, "new handshakes use the new certificate");
    assert_eq!(old.round_trip("still-here", b"old connection").await, b"old connection");

    pki.write("server.pem", "not a certificate");
    hangup(&broker);
    wait_for_log(&broker, "TLS certificate reload failed", 1);
    let after_bad = tls_connect(&connector, amqps).await.expect("handshake after a bad reload");
    assert_eq!(peer_certificate(&after_bad), second.der, "the last good certificate stays");
    assert_eq!(old.round_trip("still-here", b"again").await, b"again");
}

/// With every plain listener switched off only the TLS ones answer.
#[tokio::test]
async fn plain_listeners_can_be_switched_off() {
    let pki = Pki::new("tls-only");
    let mut flags = pki.server_flags(&pki.server("localhost"));
    flags.extend(
        ["--plain-amqp", "false", "--plain-http", "false", "--plain-metrics", "false"].map(str::to_owned),
    );
    let broker = RunningBroker::start_with(&strs(&flags));
    let (amqps, https, _) = tls_addrs(&broker);
    assert_eq!(broker.amqp.port(), 0, "the start-up line says amqp=off");
    assert_eq!(broker.log_lines_with("http=off").len(), 1);
    let tls = tls_connect(&pki.connector(None), amqps).await.expect("handshake");
    assert!(Amqp::start(tls).await.0.login("PLAIN", b"\0guest\0guest").await.is_ok());
    let (status, body) = https_get(&pki.connector(None), https, "/api/overview").await;
    assert_eq!(status, 200);
    let overview: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let protocols: Vec<&str> = overview["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .filter_map(|l| l["protocol"].as_str())
        .collect();
    assert_eq!(protocols, ["amqp/ssl", "https", "https/prometheus"], "only the TLS listeners are reported");
    // `--health-check` asks the HTTPS listener, trusting exactly the broker's own certificate.
    let https_port = https.port().to_string();
    let health = |cert: &str| {
        let key = pki.dir.join("server.key");
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hourglass"));
        command.args([
            "--health-check",
            "--bind",
            "127.0.0.1",
            "--plain-http",
            "false",
            "--https-port",
            &https_port,
        ]);
        command.args(["--tls-cert", cert, "--tls-key", key.to_str().unwrap()]);
        command.output().expect("run the health check")
    };
    let served = pki.dir.join("server.pem");
    assert!(health(served.to_str().unwrap()).status.success(), "healthy over HTTPS");
    let other = pki.write("other.pem", &pki.server("localhost").cert_pem);
    let refused = health(&other);
    assert_eq!(refused.status.code(), Some(1), "another certificate is not this broker's");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("cannot reach the management API"));
}

fn peer_certificate(tls: &Tls) -> CertificateDer<'static> {
    tls.get_ref().1.peer_certificates().and_then(|chain| chain.first()).expect("a server certificate").clone()
}

fn hangup(broker: &RunningBroker) {
    let status =
        std::process::Command::new("kill").args(["-HUP", &broker.pid().to_string()]).status().unwrap();
    assert!(status.success());
}

fn strs(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}
