//! Guards the memory an MQTT connection costs while idle: the state of its task. An async fn's state is
//! as large as its largest await point, so holding a packet or a timer across an await quietly adds
//! hundreds of bytes to every connection (DESIGN.md: at most 2 KB of process memory per idle connection,
//! socket buffers aside). Measured 992 bytes with rustc 1.95 (the device's name and profile stay in the
//! entity store's cache, not in every connection); the bound leaves room for compiler changes.

#[tokio::test]
async fn connection_task_state_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let config = fleetwire_server::Config {
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    let state = fleetwire_server::AppState::open(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (stream, peer) = listener.accept().await.unwrap();
    let task = fleetwire_server::mqtt::connection::serve(state.clone(), stream, peer);
    let bytes = std::mem::size_of_val(&task);
    assert!(
        bytes <= 1400,
        "a connection's task state grew to {bytes} bytes"
    );
    drop(task);
    drop(client);
}
