//! `credential_check_budget`: how many typed-credential checks a person has had sent to a
//! provider in the current window (`flows::credential`).

use crate::domain::{ProviderId, Subject, TenantId};
use sqlx::PgExecutor;
use time::OffsetDateTime;

/// Whose budget: a tenant's person (issuer, subject) at one provider.
pub struct BudgetKey<'a> {
    pub tenant: &'a TenantId,
    pub issuer: &'a str,
    pub subject: &'a Subject,
    pub provider: &'a ProviderId,
}

/// Takes one check from the budget, atomically: `true` if one was left (`max` per
/// `window`, which starts anew once it is over), `false` if none is. One statement, so
/// that of concurrent takers at most `max` succeed in a window.
pub async fn take(
    db: impl PgExecutor<'_>,
    key: &BudgetKey<'_>,
    now: OffsetDateTime,
    window: time::Duration,
    max: i32,
) -> Result<bool, sqlx::Error> {
    let taken = sqlx::query_scalar!(
        r#"INSERT INTO credential_check_budget AS b (tenant_id, issuer, subject, provider, window_start, used)
           VALUES ($1, $2, $3, $4, $5, 1)
           ON CONFLICT (tenant_id, issuer, subject, provider) DO UPDATE
              SET window_start = CASE WHEN b.window_start <= $6 THEN $5 ELSE b.window_start END,
                  used = CASE WHEN b.window_start <= $6 THEN 1 ELSE b.used + 1 END
            WHERE b.window_start <= $6 OR b.used < $7
           RETURNING used"#,
        key.tenant.as_str(),
        key.issuer,
        key.subject.as_str(),
        key.provider.as_str(),
        now,
        now - window,
        max,
    )
    .fetch_optional(db)
    .await?;
    Ok(taken.is_some())
}

/// Gives a check back (the value was valid: only refused and failed checks count).
pub async fn give_back(db: impl PgExecutor<'_>, key: &BudgetKey<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE credential_check_budget SET used = used - 1
          WHERE tenant_id = $1 AND issuer = $2 AND subject = $3 AND provider = $4 AND used > 0",
        key.tenant.as_str(),
        key.issuer,
        key.subject.as_str(),
        key.provider.as_str(),
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Deletes the budgets whose window started before `before` (over, and so full again).
pub async fn delete_before(db: impl PgExecutor<'_>, before: OffsetDateTime) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!("DELETE FROM credential_check_budget WHERE window_start < $1", before)
        .execute(db)
        .await?
        .rows_affected())
}
