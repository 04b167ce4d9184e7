//! What alarm clients send: the Alarm body of a save (into an [`AlarmDraft`]), an originator given as
//! entity type and id in a path, and the query parameters of the alarm pages (v1 and v2 filters).

use fleetwire_entities::{
    AlarmDraft, AlarmQuery, AlarmSearchStatus, AlarmSeverity, AlarmStatus, AlarmStatusFilter,
    Originator, PageQuery, Propagation,
};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::api::error::ApiError;
use crate::api::extract::parse_uuid;
use crate::api::json::{uuid_of, IdIn};
use crate::api::page::PageParams;

/// ThingsBoard's entity types, for telling an unknown type (400) from one without alarms.
const ENTITY_TYPES: &[&str] = &[
    "TENANT",
    "CUSTOMER",
    "USER",
    "DASHBOARD",
    "ASSET",
    "DEVICE",
    "ALARM",
    "RULE_CHAIN",
    "RULE_NODE",
    "ENTITY_VIEW",
    "WIDGETS_BUNDLE",
    "WIDGET_TYPE",
    "TENANT_PROFILE",
    "DEVICE_PROFILE",
    "ASSET_PROFILE",
    "API_USAGE_STATE",
    "TB_RESOURCE",
    "OTA_PACKAGE",
    "EDGE",
    "RPC",
    "QUEUE",
    "NOTIFICATION_TARGET",
    "NOTIFICATION_TEMPLATE",
    "NOTIFICATION_REQUEST",
    "NOTIFICATION",
    "NOTIFICATION_RULE",
    "QUEUE_STATS",
    "OAUTH2_CLIENT",
    "DOMAIN",
    "MOBILE_APP",
    "MOBILE_APP_BUNDLE",
    "CALCULATED_FIELD",
    "JOB",
    "ADMIN_SETTINGS",
    "AI_MODEL",
    "API_KEY",
];

fn enum_error(enum_name: &str, value: &str) -> ApiError {
    ApiError::bad_request(format!(
        "No enum constant org.thingsboard.server.common.data.{enum_name}.{value}"
    ))
}

pub(super) fn parse_originator(entity_type: &str, entity_id: &str) -> Result<Originator, ApiError> {
    if !ENTITY_TYPES.contains(&entity_type) {
        return Err(enum_error("EntityType", entity_type));
    }
    Ok(Originator {
        entity_type: entity_type.to_string(),
        id: parse_uuid(entity_id)?,
    })
}

/// An entity id typed only by its field (`originator`): both keys are required.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EntityIdIn {
    entity_type: Option<String>,
    id: Option<String>,
}

/// An Alarm as clients send it; `name`, `status`, tenant, customer and created time are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AlarmIn {
    id: Option<IdIn>,
    #[serde(rename = "type")]
    alarm_type: Option<String>,
    originator: Option<EntityIdIn>,
    severity: Option<String>,
    acknowledged: Option<bool>,
    cleared: Option<bool>,
    assignee_id: Option<IdIn>,
    start_ts: Option<i64>,
    end_ts: Option<i64>,
    ack_ts: Option<i64>,
    clear_ts: Option<i64>,
    assign_ts: Option<i64>,
    details: Option<Value>,
    propagate: Option<bool>,
    propagate_to_owner: Option<bool>,
    propagate_to_tenant: Option<bool>,
    propagate_relation_types: Option<Vec<String>>,
}

impl AlarmIn {
    pub(super) fn draft(self) -> Result<AlarmDraft, ApiError> {
        // ThingsBoard checks the originator is there before anything else: a 404, as for a missing
        // entity; an id object without its type fails to parse: a 400.
        let originator = self
            .originator
            .ok_or_else(|| ApiError::not_found("Requested item wasn't found!"))?;
        let (Some(entity_type), Some(id)) = (originator.entity_type, originator.id) else {
            return Err(ApiError::bad_request("Missing entityType or id!"));
        };
        let originator = parse_originator(&entity_type, &id)?;
        if originator.entity_type != Originator::DEVICE {
            return Err(ApiError::bad_request(format!(
                "Alarms of entity type {entity_type} are not supported; the originator must be a DEVICE"
            )));
        }
        let severity = self
            .severity
            .map(|s| AlarmSeverity::parse(&s).ok_or_else(|| enum_error("alarm.AlarmSeverity", &s)))
            .transpose()?;
        Ok(AlarmDraft {
            id: uuid_of(&self.id),
            alarm_type: self.alarm_type.unwrap_or_default(),
            originator,
            severity,
            acknowledged: self.acknowledged.unwrap_or(false),
            cleared: self.cleared.unwrap_or(false),
            assignee_id: uuid_of(&self.assignee_id),
            start_ts: self.start_ts.unwrap_or(0),
            end_ts: self.end_ts.unwrap_or(0),
            ack_ts: self.ack_ts.unwrap_or(0),
            clear_ts: self.clear_ts.unwrap_or(0),
            assign_ts: self.assign_ts.unwrap_or(0),
            details: self.details.unwrap_or(Value::Null),
            propagation: Propagation {
                propagate: self.propagate.unwrap_or(false),
                to_owner: self.propagate_to_owner.unwrap_or(false),
                to_tenant: self.propagate_to_tenant.unwrap_or(false),
                relation_types: self.propagate_relation_types.unwrap_or_default(),
            },
        })
    }
}

/// The query parameters of the alarm pages. Read by hand because Spring accepts a list parameter both
/// as `statusList=A,B` and as `statusList=A&statusList=B`; empty values count as absent.
#[derive(Debug, Default)]
pub(super) struct ListParams {
    pub(super) page: PageParams,
    search_status: Option<String>,
    status: Option<String>,
    status_list: Vec<String>,
    severity_list: Vec<String>,
    type_list: Vec<String>,
    assignee_id: Option<String>,
    start_time: Option<String>,
    end_time: Option<String>,
}

impl ListParams {
    pub(super) fn parse(raw: Option<String>) -> ListParams {
        let mut p = ListParams::default();
        let raw = raw.unwrap_or_default();
        for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
            let value = value.into_owned();
            let list = |list: &mut Vec<String>| {
                list.extend(
                    value
                        .split(',')
                        .filter(|s| !s.trim().is_empty())
                        .map(str::to_string),
                )
            };
            if value.is_empty() {
                continue;
            }
            match key.as_ref() {
                "pageSize" => p.page.page_size = Some(value),
                "page" => p.page.page = Some(value),
                "textSearch" => p.page.text_search = Some(value),
                "sortProperty" => p.page.sort_property = Some(value),
                "sortOrder" => p.page.sort_order = Some(value),
                "searchStatus" => p.search_status = Some(value),
                "status" => p.status = Some(value),
                "statusList" => list(&mut p.status_list),
                "severityList" => list(&mut p.severity_list),
                "typeList" => list(&mut p.type_list),
                "assigneeId" => p.assignee_id = Some(value),
                "startTime" => p.start_time = Some(value),
                "endTime" => p.end_time = Some(value),
                _ => {}
            }
        }
        p
    }

    fn time(value: &Option<String>) -> Result<Option<i64>, ApiError> {
        value
            .as_deref()
            .map(|text| {
                text.trim().parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "Failed to convert value of type 'java.lang.String' to required type 'java.lang.Long'; For input string: \"{text}\""
                    ))
                })
            })
            .transpose()
    }

    pub(super) fn assignee(&self) -> Result<Option<Uuid>, ApiError> {
        self.assignee_id.as_deref().map(parse_uuid).transpose()
    }

    /// The page, and the filters both versions share (assignee, created-time range).
    fn common(&self) -> Result<(PageQuery, AlarmQuery), ApiError> {
        let page = self.page.query()?;
        let query = AlarmQuery {
            assignee_id: self.assignee()?,
            start_time: ListParams::time(&self.start_time)?,
            end_time: ListParams::time(&self.end_time)?,
            ..AlarmQuery::default()
        };
        Ok((page, query))
    }

    /// v1's `searchStatus` or `status` (not both).
    pub(super) fn status_v1(&self) -> Result<AlarmStatusFilter, ApiError> {
        let search = self
            .search_status
            .as_deref()
            .map(|s| {
                AlarmSearchStatus::parse(s).ok_or_else(|| enum_error("alarm.AlarmSearchStatus", s))
            })
            .transpose()?;
        let status = self
            .status
            .as_deref()
            .map(|s| AlarmStatus::parse(s).ok_or_else(|| enum_error("alarm.AlarmStatus", s)))
            .transpose()?;
        Ok(AlarmStatusFilter::from_params(search, status)?)
    }

    pub(super) fn v1(&self) -> Result<(PageQuery, AlarmQuery), ApiError> {
        let status = self.status_v1()?;
        let (page, query) = self.common()?;
        Ok((page, AlarmQuery { status, ..query }))
    }

    /// v2: `statusList`, `severityList`, `typeList`.
    pub(super) fn v2(&self) -> Result<(PageQuery, AlarmQuery), ApiError> {
        let statuses = self
            .status_list
            .iter()
            .map(|s| {
                AlarmSearchStatus::parse(s).ok_or_else(|| enum_error("alarm.AlarmSearchStatus", s))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let severities = self
            .severity_list
            .iter()
            .map(|s| AlarmSeverity::parse(s).ok_or_else(|| enum_error("alarm.AlarmSeverity", s)))
            .collect::<Result<Vec<_>, _>>()?;
        let (page, query) = self.common()?;
        Ok((
            page,
            AlarmQuery {
                status: AlarmStatusFilter::from_list(&statuses),
                severities,
                types: self.type_list.clone(),
                ..query
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn list_params_accept_both_list_forms_and_ignore_empty_values() {
        let p = ListParams::parse(Some(
            "pageSize=10&page=0&statusList=ACTIVE,UNACK&statusList=ACK&typeList=battery%20low&\
             severityList=&searchStatus=&textSearch=x%2Cy"
                .into(),
        ));
        assert_eq!(p.status_list, ["ACTIVE", "UNACK", "ACK"]);
        assert_eq!(p.type_list, ["battery low"]);
        assert!(p.severity_list.is_empty() && p.search_status.is_none());
        assert_eq!(p.page.text_search.as_deref(), Some("x,y"));
        let (page, query) = p.v2().unwrap();
        assert_eq!((page.page_size, page.page), (10, 0));
        let expected = AlarmStatusFilter {
            cleared: Some(false),
            acknowledged: None,
        };
        assert_eq!(
            query.status, expected,
            "ACTIVE alone; ACK and UNACK cancel out"
        );
        assert!(
            ListParams::parse(None).v1().is_err(),
            "pageSize is required"
        );
        let both = ListParams::parse(Some("searchStatus=ACK&status=ACTIVE_ACK".into()));
        assert_eq!(
            both.status_v1().unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
    }
}
