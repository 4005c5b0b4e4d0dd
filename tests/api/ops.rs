use crate::support::spawn_app;

#[tokio::test]
async fn healthz_and_readyz_answer_ok_on_a_migrated_database() {
    let app = spawn_app().await;
    let r = app.client.get(format!("{}/healthz", app.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = app.client.get(format!("{}/readyz", app.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "ready");
}

#[tokio::test]
async fn readyz_reports_pending_migrations() {
    let app = spawn_app().await;
    sqlx::query("DELETE FROM _sqlx_migrations").execute(&app.pool).await.unwrap();
    let r = app.client.get(format!("{}/readyz", app.base)).send().await.unwrap();
    assert_eq!(r.status(), 503);
}

#[tokio::test]
async fn responses_carry_a_request_id_and_are_not_cached() {
    let app = spawn_app().await;
    let r = app.client.get(format!("{}/healthz", app.base)).send().await.unwrap();
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert_eq!(r.headers()["x-request-id"].len(), 16);
}
