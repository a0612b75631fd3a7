//! Clustered mode's settings (docs/clustering.md): on when etcd endpoints are given, otherwise
//! the node runs alone exactly as before.

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

/// The port followers listen on for the leader's replication stream.
pub const DEFAULT_REPLICATION_PORT: u16 = 5679;
/// The etcd key prefix's cluster name.
pub const DEFAULT_CLUSTER_NAME: &str = "hourglass";
/// The longest node name: it goes into every replication handshake, whose frames are kept small
/// before the peer is authenticated (`hourglass_cluster::repl::auth::NAME_BYTES_MAX`).
pub const NODE_NAME_BYTES_MAX: usize = hourglass_cluster::repl::auth::NAME_BYTES_MAX;
/// Seconds a leader's lease lasts without renewal: after a leader dies or hangs, a follower takes
/// over within about this long. 3 s keeps failover under 5 s; etcd's smallest usable TTL is
/// about 2 s with its default heartbeat (100 ms) and election timeout (1 s).
pub const DEFAULT_LEASE_TTL_SECS: u64 = 3;

/// Clustered mode's flags (each also an environment variable).
#[derive(Args, Debug, Default, Clone)]
pub struct ClusterCli {
    /// etcd endpoints (`http://host:2379[,http://…]`): runs this node as a member of a cluster.
    #[arg(long, env = "HOURGLASS_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Option<Vec<String>>,
    /// The cluster's name: its etcd key prefix (`/hourglass/NAME/`).
    #[arg(long, env = "HOURGLASS_CLUSTER_NAME")]
    pub cluster_name: Option<String>,
    /// This node's name in the cluster (default: the host name).
    #[arg(long, env = "HOURGLASS_NODE_NAME")]
    pub node_name: Option<String>,
    /// The port this node takes replication streams on when it follows.
    #[arg(long, env = "HOURGLASS_REPLICATION_PORT")]
    pub replication_port: Option<u16>,
    /// The host other nodes and forwarded clients dial to reach this node (default: the bind
    /// address, or the host name when binding every interface).
    #[arg(long, env = "HOURGLASS_ADVERTISE_HOST")]
    pub advertise_host: Option<String>,
    /// Nodes (the leader included) that must hold a record before it is confirmed (default: a
    /// majority of the cluster's members).
    #[arg(long, env = "HOURGLASS_MIN_IN_SYNC")]
    pub min_in_sync: Option<usize>,
    /// Seconds a leader's etcd lease lasts without renewal.
    #[arg(long, env = "HOURGLASS_ETCD_LEASE_TTL")]
    pub etcd_lease_ttl: Option<u64>,
    /// Mutual TLS on the replication port with --tls-cert/--tls-key, peers verified against
    /// --tls-ca (`true`/`false`).
    #[arg(long, env = "HOURGLASS_REPLICATION_TLS")]
    pub replication_tls: Option<bool>,
    /// A file holding the cluster's shared secret (at least 16 bytes; every node the same):
    /// replication connections prove it before anything else.
    #[arg(long, env = "HOURGLASS_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// CA certificate (PEM) etcd's server certificate must chain to; needed for `https://`
    /// endpoints.
    #[arg(long, env = "HOURGLASS_ETCD_CACERT")]
    pub etcd_cacert: Option<PathBuf>,
    /// Client certificate chain (PEM) this node presents to etcd (etcd's `--client-cert-auth`).
    #[arg(long, env = "HOURGLASS_ETCD_CERT")]
    pub etcd_cert: Option<PathBuf>,
    /// The private key (PEM) of `--etcd-cert`.
    #[arg(long, env = "HOURGLASS_ETCD_KEY")]
    pub etcd_key: Option<PathBuf>,
}

/// The same settings in the TOML file.
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub etcd_endpoints: Option<Vec<String>>,
    pub cluster_name: Option<String>,
    pub node_name: Option<String>,
    pub replication_port: Option<u16>,
    pub advertise_host: Option<String>,
    pub min_in_sync: Option<usize>,
    pub etcd_lease_ttl: Option<u64>,
    pub replication_tls: Option<bool>,
    pub cluster_secret_file: Option<PathBuf>,
    pub etcd_cacert: Option<PathBuf>,
    pub etcd_cert: Option<PathBuf>,
    pub etcd_key: Option<PathBuf>,
}

/// Clustered mode, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    pub etcd_endpoints: Vec<String>,
    pub cluster_name: String,
    pub node_name: String,
    pub replication_port: u16,
    /// `None`: derive from the bind address.
    pub advertise_host: Option<String>,
    pub min_in_sync: Option<usize>,
    pub lease_ttl_secs: u64,
    /// Mutual TLS on the replication port (needs the TLS certificate, key and CA).
    pub replication_tls: bool,
    /// The cluster secret's file (read at start). A clustered node has it, or replication TLS,
    /// or both: an unauthenticated replication port would let anyone pose as the leader.
    pub cluster_secret_file: Option<PathBuf>,
    /// TLS to etcd: its CA, and this node's client certificate and key if etcd asks for one.
    pub etcd_tls: Option<EtcdTlsFiles>,
}

/// Where the PEM files for TLS to etcd are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTlsFiles {
    pub ca: PathBuf,
    pub client: Option<(PathBuf, PathBuf)>,
}

/// The etcd TLS files given, checked for consistency with the endpoints.
fn etcd_tls(
    endpoints: &[String],
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> anyhow::Result<Option<EtcdTlsFiles>> {
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => anyhow::bail!("etcd_cert and etcd_key go together"),
    };
    let https = endpoints.iter().filter(|e| e.starts_with("https://")).count();
    match ca {
        Some(_) if https != endpoints.len() => {
            anyhow::bail!("etcd_cacert is given: every etcd endpoint must be https://")
        }
        Some(ca) => Ok(Some(EtcdTlsFiles { ca, client })),
        None if https > 0 => {
            anyhow::bail!("https:// etcd endpoints need etcd_cacert (the CA etcd's certificate chains to)")
        }
        None if client.is_some() => anyhow::bail!("etcd_cert needs etcd_cacert and https:// endpoints"),
        None => Ok(None),
    }
}

/// Flags over the file; `None` when no etcd endpoint is given (a single node).
pub fn resolve(cli: ClusterCli, file: ClusterFile) -> anyhow::Result<Option<ClusterConfig>> {
    let endpoints: Vec<String> = cli
        .etcd_endpoints
        .or(file.etcd_endpoints)
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .map(|e| if e.contains("://") { e } else { format!("http://{e}") })
        .collect();
    if endpoints.is_empty() {
        return Ok(None);
    }
    let lease_ttl_secs = cli.etcd_lease_ttl.or(file.etcd_lease_ttl).unwrap_or(DEFAULT_LEASE_TTL_SECS);
    anyhow::ensure!((1..=60).contains(&lease_ttl_secs), "etcd_lease_ttl must be 1..60 seconds");
    let min_in_sync = cli.min_in_sync.or(file.min_in_sync);
    anyhow::ensure!(min_in_sync != Some(0), "min_in_sync must be at least 1");
    let node_name = cli.node_name.or(file.node_name).unwrap_or_else(host_name);
    anyhow::ensure!(
        !node_name.is_empty() && !node_name.contains('/') && node_name.len() <= NODE_NAME_BYTES_MAX,
        "node_name must be 1 to {NODE_NAME_BYTES_MAX} bytes and contain no '/'"
    );
    let replication_tls = cli.replication_tls.or(file.replication_tls).unwrap_or(false);
    let cluster_secret_file = cli.cluster_secret_file.or(file.cluster_secret_file);
    if cluster_secret_file.is_none() && !replication_tls {
        anyhow::bail!(
            "clustered mode needs cluster_secret_file (--cluster-secret-file) or replication_tls: make a secret with `{}` and give every node the same file",
            hourglass_cluster::repl::auth::MAKE_SECRET
        );
    }
    let etcd_tls = etcd_tls(
        &endpoints,
        cli.etcd_cacert.or(file.etcd_cacert),
        cli.etcd_cert.or(file.etcd_cert),
        cli.etcd_key.or(file.etcd_key),
    )?;
    Ok(Some(ClusterConfig {
        etcd_tls,
        etcd_endpoints: endpoints,
        cluster_name: cli
            .cluster_name
            .or(file.cluster_name)
            .unwrap_or_else(|| DEFAULT_CLUSTER_NAME.to_owned()),
        node_name,
        replication_port: cli.replication_port.or(file.replication_port).unwrap_or(DEFAULT_REPLICATION_PORT),
        advertise_host: cli.advertise_host.or(file.advertise_host),
        min_in_sync,
        lease_ttl_secs,
        replication_tls,
        cluster_secret_file,
    }))
}

/// The machine's host name (RabbitMQ names nodes `rabbit@HOST`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TLS to etcd needs its CA with https:// endpoints, and a client certificate with its key.
    #[test]
    fn etcd_tls_settings_must_agree_with_the_endpoints() {
        let https = Some(vec!["https://127.0.0.1:2379".to_owned()]);
        let cli = |endpoints: Option<Vec<String>>,
                   ca: Option<&str>,
                   cert: Option<&str>,
                   key: Option<&str>| ClusterCli {
            etcd_endpoints: endpoints,
            etcd_cacert: ca.map(PathBuf::from),
            etcd_cert: cert.map(PathBuf::from),
            etcd_key: key.map(PathBuf::from),
            cluster_secret_file: Some(PathBuf::from("secret")),
            ..ClusterCli::default()
        };
        let resolved = |c| resolve(c, ClusterFile::default());
        let ok = resolved(cli(https.clone(), Some("ca.pem"), Some("c.pem"), Some("k.pem"))).unwrap().unwrap();
        let files = ok.etcd_tls.unwrap();
        assert_eq!(files.client, Some((PathBuf::from("c.pem"), PathBuf::from("k.pem"))));
        assert!(resolved(cli(https.clone(), None, None, None))
            .unwrap_err()
            .to_string()
            .contains("etcd_cacert"));
        assert!(resolved(cli(https, Some("ca.pem"), Some("c.pem"), None)).is_err());
        let plain = Some(vec!["127.0.0.1:2379".to_owned()]);
        assert!(resolved(cli(plain.clone(), Some("ca.pem"), None, None)).is_err());
        assert_eq!(resolved(cli(plain, None, None, None)).unwrap().unwrap().etcd_tls, None);
    }

    #[test]
    fn no_endpoints_means_a_single_node() {
        assert_eq!(resolve(ClusterCli::default(), ClusterFile::default()).unwrap(), None);
    }

    #[test]
    fn flags_beat_the_file_and_defaults_fill_the_rest() {
        let cli = ClusterCli {
            etcd_endpoints: Some(vec!["127.0.0.1:2379".into()]),
            node_name: Some("n1".into()),
            ..ClusterCli::default()
        };
        let file = ClusterFile {
            node_name: Some("file".into()),
            min_in_sync: Some(2),
            cluster_secret_file: Some("secret".into()),
            ..ClusterFile::default()
        };
        let config = resolve(cli, file).unwrap().unwrap();
        assert_eq!(config.etcd_endpoints, vec!["http://127.0.0.1:2379".to_owned()]);
        assert_eq!((config.node_name.as_str(), config.min_in_sync), ("n1", Some(2)));
        assert_eq!((config.cluster_name.as_str(), config.replication_port), ("hourglass", 5679));
        assert_eq!(config.lease_ttl_secs, DEFAULT_LEASE_TTL_SECS);
        assert_eq!(config.cluster_secret_file, Some(PathBuf::from("secret")));
    }

    /// A clustered node without a secret and without replication TLS is refused, with the
    /// command that makes a secret; either one alone is enough.
    #[test]
    fn a_node_with_neither_secret_nor_replication_tls_is_refused() {
        let endpoints = Some(vec!["http://e:2379".to_owned()]);
        let bare = ClusterCli { etcd_endpoints: endpoints.clone(), ..ClusterCli::default() };
        let error = resolve(bare, ClusterFile::default()).unwrap_err().to_string();
        assert!(
            error.contains("cluster_secret_file") && error.contains("head -c 32 /dev/urandom"),
            "{error}"
        );
        assert!(!error.contains('\n'), "one line: {error}");
        let tls = ClusterCli {
            etcd_endpoints: endpoints.clone(),
            replication_tls: Some(true),
            ..ClusterCli::default()
        };
        assert!(resolve(tls, ClusterFile::default()).is_ok());
        let secret = ClusterCli {
            etcd_endpoints: endpoints,
            cluster_secret_file: Some("s".into()),
            ..ClusterCli::default()
        };
        assert!(resolve(secret, ClusterFile::default()).is_ok());
    }

    #[test]
    fn nonsense_is_refused() {
        let endpoints = Some(vec!["http://e:2379".to_owned()]);
        let secret = ClusterFile { cluster_secret_file: Some("s".into()), ..ClusterFile::default() };
        let zero =
            ClusterCli { etcd_endpoints: endpoints.clone(), min_in_sync: Some(0), ..ClusterCli::default() };
        assert!(resolve(zero, secret.clone()).is_err());
        let slash = ClusterCli {
            etcd_endpoints: endpoints.clone(),
            node_name: Some("a/b".into()),
            ..ClusterCli::default()
        };
        assert!(resolve(slash, secret.clone()).is_err());
        let long = ClusterCli {
            etcd_endpoints: endpoints,
            node_name: Some("n".repeat(NODE_NAME_BYTES_MAX + 1)),
            ..ClusterCli::default()
        };
        assert!(resolve(long, secret).is_err());
    }
}
