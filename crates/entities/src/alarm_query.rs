//! Alarm queries: the pages of an originator's or a tenant's alarms with every filter of reference 4.8
//! (status, severity, type, assignee, text, created-time range), the highest severity of an originator,
//! and the tenant's alarm types.

use rusqlite::params_from_iter;
use rusqlite::types::Value as SqlValue;
use uuid::Uuid;

use crate::alarm::{AlarmInfo, AlarmSeverity, AlarmStatus, Originator};
use crate::alarm_row;
use crate::{Entities, EntityError, PageData, PageQuery, NULL_UUID};

/// `searchStatus` (and the items of v2's `statusList`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlarmSearchStatus {
    Any,
    Active,
    Cleared,
    Ack,
    Unack,
}

impl AlarmSearchStatus {
    pub const ALL: [AlarmSearchStatus; 5] = [
        AlarmSearchStatus::Any,
        AlarmSearchStatus::Active,
        AlarmSearchStatus::Cleared,
        AlarmSearchStatus::Ack,
        AlarmSearchStatus::Unack,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlarmSearchStatus::Any => "ANY",
            AlarmSearchStatus::Active => "ACTIVE",
            AlarmSearchStatus::Cleared => "CLEARED",
            AlarmSearchStatus::Ack => "ACK",
            AlarmSearchStatus::Unack => "UNACK",
        }
    }

    pub fn parse(text: &str) -> Option<AlarmSearchStatus> {
        AlarmSearchStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// Which of the two flags an alarm must have; `None` = either.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlarmStatusFilter {
    pub cleared: Option<bool>,
    pub acknowledged: Option<bool>,
}

impl AlarmStatusFilter {
    /// No filter.
    pub const ANY: AlarmStatusFilter = AlarmStatusFilter {
        cleared: None,
        acknowledged: None,
    };

    /// The v1 parameters `searchStatus` and `status`; giving both is ThingsBoard's 400.
    pub fn from_params(
        search_status: Option<AlarmSearchStatus>,
        status: Option<AlarmStatus>,
    ) -> Result<AlarmStatusFilter, EntityError> {
        match (search_status, status) {
            (Some(_), Some(_)) => Err(EntityError::invalid(
                "Invalid alarms search query: Both parameters 'searchStatus' and 'status' can't be specified at the same time!",
            )),
            (Some(search), None) => Ok(AlarmStatusFilter::from_search_status(search)),
            (None, Some(status)) => Ok(AlarmStatusFilter::from_status(status)),
            (None, None) => Ok(AlarmStatusFilter::ANY),
        }
    }

    pub fn from_search_status(search: AlarmSearchStatus) -> AlarmStatusFilter {
        AlarmStatusFilter::from_list(&[search])
    }

    pub fn from_status(status: AlarmStatus) -> AlarmStatusFilter {
        AlarmStatusFilter {
            cleared: Some(status.is_cleared()),
            acknowledged: Some(status.is_acknowledged()),
        }
    }

    /// v2's `statusList`, as ThingsBoard's `AlarmStatusFilter.from`: ANY (or an empty list) filters
    /// nothing; ACTIVE or CLEARED alone filters the cleared flag, both cancel out; ACK and UNACK likewise.
    pub fn from_list(list: &[AlarmSearchStatus]) -> AlarmStatusFilter {
        if list.is_empty() || list.contains(&AlarmSearchStatus::Any) {
            return AlarmStatusFilter::ANY;
        }
        let either = |yes: AlarmSearchStatus, no: AlarmSearchStatus| match (
            list.contains(&yes),
            list.contains(&no),
        ) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            _ => None,
        };
        AlarmStatusFilter {
            cleared: either(AlarmSearchStatus::Cleared, AlarmSearchStatus::Active),
            acknowledged: either(AlarmSearchStatus::Ack, AlarmSearchStatus::Unack),
        }
    }
}

/// The filters of an alarm page. Empty lists and `None` filter nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlarmQuery {
    /// `None`: the whole tenant. A TENANT originator also matches the alarms propagated to the tenant
    /// (`propagateToTenant`, or `propagateToOwner` of an alarm without customer).
    pub originator: Option<Originator>,
    pub status: AlarmStatusFilter,
    pub severities: Vec<AlarmSeverity>,
    pub types: Vec<String>,
    pub assignee_id: Option<Uuid>,
    /// Inclusive bounds on `createdTime`.
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
}

/// Severity as a number, most severe 0, for sorting and for the highest severity.
const SEVERITY_RANK: &str = "(CASE a.severity WHEN 'CRITICAL' THEN 0 WHEN 'MAJOR' THEN 1 \
    WHEN 'MINOR' THEN 2 WHEN 'WARNING' THEN 3 ELSE 4 END)";

/// The derived status, as text.
const STATUS: &str = "(CASE WHEN a.cleared THEN (CASE WHEN a.acknowledged THEN 'CLEARED_ACK' \
    ELSE 'CLEARED_UNACK' END) ELSE (CASE WHEN a.acknowledged THEN 'ACTIVE_ACK' ELSE 'ACTIVE_UNACK' END) END)";

/// A `WHERE` clause over `alarm a` and its arguments.
struct Where {
    sql: Vec<String>,
    args: Vec<SqlValue>,
}

impl Where {
    fn new(tenant_id: Uuid) -> Where {
        let mut w = Where {
            sql: Vec::new(),
            args: Vec::new(),
        };
        w.add("a.tenant_id = ?", [SqlValue::Text(tenant_id.to_string())]);
        w
    }

    /// Adds a condition whose `?` placeholders take `args` in order.
    fn add(&mut self, condition: &str, args: impl IntoIterator<Item = SqlValue>) {
        self.sql.push(condition.to_string());
        self.args.extend(args);
    }

    fn any_of(&mut self, column: &str, values: impl ExactSizeIterator<Item = String>) {
        if values.len() == 0 {
            return;
        }
        let marks = vec!["?"; values.len()].join(", ");
        self.add(
            &format!("{column} IN ({marks})"),
            values.map(SqlValue::Text),
        );
    }

    fn filter(&mut self, query: &AlarmQuery) {
        if let Some(originator) = &query.originator {
            let id = SqlValue::Text(originator.id.to_string());
            if originator.entity_type == "TENANT" {
                self.add(
                    &format!(
                        "(a.originator_id = ? OR (a.tenant_id = ? AND (a.propagate_to_tenant = 1 \
                         OR (a.propagate_to_owner = 1 AND a.customer_id = '{NULL_UUID}'))))"
                    ),
                    [id.clone(), id],
                );
            } else {
                self.add(
                    "a.originator_type = ? AND a.originator_id = ?",
                    [SqlValue::Text(originator.entity_type.clone()), id],
                );
            }
        }
        if let Some(cleared) = query.status.cleared {
            self.add("a.cleared = ?", [SqlValue::Integer(cleared.into())]);
        }
        if let Some(acknowledged) = query.status.acknowledged {
            self.add(
                "a.acknowledged = ?",
                [SqlValue::Integer(acknowledged.into())],
            );
        }
        self.any_of(
            "a.severity",
            query.severities.iter().map(|s| s.as_str().to_string()),
        );
        self.any_of("a.type", query.types.iter().cloned());
        if let Some(assignee) = query.assignee_id {
            self.add("a.assignee_id = ?", [SqlValue::Text(assignee.to_string())]);
        }
        if let Some(start) = query.start_time {
            self.add("a.created_time >= ?", [SqlValue::Integer(start)]);
        }
        if let Some(end) = query.end_time {
            self.add("a.created_time <= ?", [SqlValue::Integer(end)]);
        }
    }

    /// ThingsBoard's alarm text search: a case-insensitive substring of type, severity or status.
    fn text(&mut self, search: Option<&str>) {
        if let Some(text) = search {
            let text = SqlValue::Text(text.to_lowercase());
            self.add(
                &format!(
                    "(instr(lower(a.type), ?) > 0 OR instr(lower(a.severity), ?) > 0 \
                     OR instr(lower({STATUS}), ?) > 0)"
                ),
                [text.clone(), text.clone(), text],
            );
        }
    }

    fn sql(&self) -> String {
        self.sql.join(" AND ")
    }
}

impl Entities {
    /// A page of the tenant's alarms (of one originator when `query.originator` is set), with their
    /// originators' names and assignees. Sort properties: createdTime (default), startTs, endTs, type,
    /// ackTs, clearTs, severity (CRITICAL first when ascending), status.
    pub fn alarms(
        &self,
        tenant_id: Uuid,
        query: &AlarmQuery,
        page: &PageQuery,
    ) -> Result<PageData<AlarmInfo>, EntityError> {
        let status_sort = STATUS;
        let severity_sort = SEVERITY_RANK;
        let order = page.order_limit(
            &[
                ("createdTime", "a.created_time"),
                ("startTs", "a.start_ts"),
                ("endTs", "a.end_ts"),
                ("type", "a.type"),
                ("ackTs", "a.ack_ts"),
                ("clearTs", "a.clear_ts"),
                ("severity", severity_sort),
                ("status", status_sort),
            ],
            "a.created_time",
            "a.rowid",
        )?;
        let mut w = Where::new(tenant_id);
        w.filter(query);
        w.text(page.search());
        let conditions = w.sql();
        self.with_conn(|conn| {
            let total: u64 = conn.query_row(
                &format!("SELECT count(*) FROM alarm a WHERE {conditions}"),
                params_from_iter(&w.args),
                |r| r.get(0),
            )?;
            let mut stmt = conn.prepare(&format!(
                "{} WHERE {conditions} {order}",
                alarm_row::INFO_SELECT
            ))?;
            let rows = stmt
                .query_map(params_from_iter(&w.args), alarm_row::info_from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(page.page_of(rows, total))
        })
    }

    /// The most severe severity among the tenant's alarms of `originator` that pass the filters, or
    /// `None` when there are none.
    pub fn highest_alarm_severity(
        &self,
        tenant_id: Uuid,
        originator: &Originator,
        status: AlarmStatusFilter,
        assignee_id: Option<Uuid>,
    ) -> Result<Option<AlarmSeverity>, EntityError> {
        let query = AlarmQuery {
            originator: Some(originator.clone()),
            status,
            assignee_id,
            ..AlarmQuery::default()
        };
        let mut w = Where::new(tenant_id);
        w.filter(&query);
        let rank: Option<i64> = self.with_conn(|conn| {
            Ok(conn.query_row(
                &format!("SELECT min({SEVERITY_RANK}) FROM alarm a WHERE {}", w.sql()),
                params_from_iter(&w.args),
                |r| r.get(0),
            )?)
        })?;
        Ok(rank.and_then(|r| {
            usize::try_from(r)
                .ok()
                .and_then(|r| AlarmSeverity::ALL.get(r).copied())
        }))
    }

    /// A page of the distinct types of the tenant's alarms, sorted by type (`sortOrder` applies; the
    /// sort property is always the type, as in ThingsBoard); text search on the type.
    pub fn alarm_types(
        &self,
        tenant_id: Uuid,
        page: &PageQuery,
    ) -> Result<PageData<String>, EntityError> {
        let by_type = PageQuery {
            sort_property: Some("type".into()),
            ..page.clone()
        };
        let order = by_type.order_limit(&[("type", "type")], "type", "type")?;
        let filter = "tenant_id = ?1 AND (?2 IS NULL OR instr(lower(type), lower(?2)) > 0)";
        let args = rusqlite::params![tenant_id.to_string(), page.search()];
        self.with_conn(|conn| {
            let total: u64 = conn.query_row(
                &format!("SELECT count(DISTINCT type) FROM alarm WHERE {filter}"),
                args,
                |r| r.get(0),
            )?;
            let mut stmt = conn.prepare(&format!(
                "SELECT DISTINCT type FROM alarm WHERE {filter} {order}"
            ))?;
            let rows = stmt
                .query_map(args, |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            Ok(page.page_of(rows, total))
        })
    }
}

#[cfg(test)]
#[path = "alarm_query_tests.rs"]
mod tests;
