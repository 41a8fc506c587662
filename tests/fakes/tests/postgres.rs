//! The PostgreSQL fixture against real PostgreSQL: `test_database()` on the cluster
//! `tests/postgres/setup` started, and `PrivateCluster` surviving restarts and crashes. Each
//! test skips without PostgreSQL, unless `FERRY_REQUIRE_POSTGRES=1`.

use ferry_fakes::{PrivateCluster, test_database};
use tokio_postgres::Client;

/// Whether `table` exists in the database `client` is connected to.
async fn has_table(client: &Client, table: &str) -> bool {
    let row = client.query_one("SELECT to_regclass($1)::text", &[&table]).await.expect("to_regclass");
    row.get::<_, Option<String>>(0).is_some()
}

/// The `body` column of `notes`, in insertion order.
async fn notes(client: &Client) -> Vec<String> {
    let rows = client.query("SELECT body FROM notes ORDER BY id", &[]).await.expect("reading notes");
    rows.iter().map(|row| row.get(0)).collect()
}

#[tokio::test]
async fn test_database_is_an_empty_database_of_its_own_on_postgresql_15_or_newer() {
    let Some(db) = test_database().await else { return };
    assert!(db.name().starts_with("ferry_t_") && db.url().ends_with(&format!("/{}", db.name())), "{db:?}");
    let client = db.connect().await;

    let version: String = client.query_one("SELECT version()", &[]).await.expect("version()").get(0);
    assert!(version.starts_with("PostgreSQL "), "{version}");
    let number: String = client.query_one("SHOW server_version_num", &[]).await.expect("server_version_num").get(0);
    let number: u32 = number.parse().expect("server_version_num is a number");
    assert!(number >= 150_000, "PostgreSQL 15 or newer expected, got {version}");

    let current: String = client.query_one("SELECT current_database()", &[]).await.expect("current_database()").get(0);
    assert_eq!(current, db.name());
    let tables: i64 = client
        .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", &[])
        .await
        .expect("counting tables")
        .get(0);
    assert_eq!(tables, 0);
}

#[tokio::test]
async fn two_test_databases_are_isolated_and_dropping_one_removes_it() {
    let Some(first) = test_database().await else { return };
    let Some(second) = test_database().await else { return };
    assert_ne!(first.name(), second.name());

    let (one, two) = (first.connect().await, second.connect().await);
    one.batch_execute("CREATE TABLE marker (id int); INSERT INTO marker VALUES (1)").await.expect("creating marker");
    assert!(has_table(&one, "marker").await);
    assert!(!has_table(&two, "marker").await, "a table created in {} is visible in {}", first.name(), second.name());

    // Dropped with the handle, even with a connection still open on it.
    let name = first.name().to_owned();
    drop(first);
    let left: i64 = two
        .query_one("SELECT count(*) FROM pg_database WHERE datname = $1", &[&name])
        .await
        .expect("looking for the dropped database")
        .get(0);
    assert_eq!(left, 0, "{name} still exists after its handle dropped");
    assert!(one.simple_query("SELECT 1").await.is_err(), "the connection to the dropped database still works");
}

#[tokio::test]
async fn private_cluster_keeps_committed_rows_across_a_restart() {
    let Some(cluster) = PrivateCluster::start().await else { return };
    let port = cluster.port();
    let client = cluster.connect().await;
    client
        .batch_execute(
            "CREATE TABLE notes (id serial PRIMARY KEY, body text); INSERT INTO notes (body) VALUES ('before')",
        )
        .await
        .expect("creating notes");

    cluster.restart().await;

    assert!(client.simple_query("SELECT 1").await.is_err(), "a session survived a fast restart");
    assert_eq!(cluster.port(), port);
    let client = cluster.connect().await;
    assert_eq!(notes(&client).await, ["before"]);
}

#[tokio::test]
async fn private_cluster_refuses_connections_after_a_kill_and_recovers_committed_rows() {
    let Some(cluster) = PrivateCluster::start().await else { return };
    let client = cluster.connect().await;
    client
        .batch_execute(
            "CREATE TABLE notes (id serial PRIMARY KEY, body text); INSERT INTO notes (body) VALUES ('committed')",
        )
        .await
        .expect("creating notes");
    // Left uncommitted by the crash: must be gone after recovery.
    client.batch_execute("BEGIN; INSERT INTO notes (body) VALUES ('in flight')").await.expect("an open transaction");

    cluster.kill().await;

    assert!(client.batch_execute("COMMIT").await.is_err(), "a transaction committed on a killed server");
    assert!(cluster.try_connect().await.is_err(), "a killed server accepted a connection");

    cluster.start_again().await;

    let client = cluster.connect().await;
    assert_eq!(notes(&client).await, ["committed"]);
}

#[tokio::test]
async fn private_cluster_refuses_connections_while_stopped() {
    let Some(cluster) = PrivateCluster::start().await else { return };
    cluster.stop().await;
    assert!(cluster.try_connect().await.is_err(), "a stopped server accepted a connection");
    cluster.start_again().await;
    let client = cluster.connect().await;
    let answer: i32 = client.query_one("SELECT 1", &[]).await.expect("SELECT 1").get(0);
    assert_eq!(answer, 1);
}
