//! Page parameters in, `PageData` JSON out.

use fleetwire_entities::{PageData, PageQuery, SortOrder};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;

/// `pageSize` and `page` (both required), `textSearch`, `sortProperty`, `sortOrder`. Kept as strings so
/// a bad number gets a ThingsBoard-style message rather than a deserializer's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageParams {
    pub page_size: Option<String>,
    pub page: Option<String>,
    pub text_search: Option<String>,
    pub sort_property: Option<String>,
    pub sort_order: Option<String>,
}

fn required_int(value: &Option<String>, name: &str) -> Result<i64, ApiError> {
    let text = value.as_deref().ok_or_else(|| {
        ApiError::bad_request(format!(
            "Required request parameter '{name}' for method parameter type int is not present"
        ))
    })?;
    text.trim().parse().map_err(|_| {
        ApiError::bad_request(format!(
            "Failed to convert value of type 'java.lang.String' to required type 'int'; For input string: \"{text}\""
        ))
    })
}

impl PageParams {
    pub fn query(&self) -> Result<PageQuery, ApiError> {
        let page_size = required_int(&self.page_size, "pageSize")?;
        let page = required_int(&self.page, "page")?;
        if page_size < 1 {
            return Err(ApiError::bad_request(format!(
                "Incorrect page link page size '{page_size}'. Page size must be greater than zero."
            )));
        }
        if page < 0 {
            return Err(ApiError::bad_request(format!(
                "Incorrect page link page '{page}'. Page must be positive integer."
            )));
        }
        let sort_order = match self.sort_order.as_deref().filter(|s| !s.is_empty()) {
            None => SortOrder::Asc,
            Some(text) => SortOrder::parse(text)?,
        };
        Ok(PageQuery {
            page_size: u32::try_from(page_size).unwrap_or(u32::MAX),
            page: u32::try_from(page).unwrap_or(u32::MAX),
            text_search: self.text_search.clone(),
            sort_property: self.sort_property.clone(),
            sort_order,
        })
    }
}

/// `{"data":[…],"totalPages":N,"totalElements":N,"hasNext":bool}`.
pub fn page_json<T>(page: &PageData<T>, render: impl Fn(&T) -> Value) -> Value {
    json!({
        "data": page.data.iter().map(render).collect::<Vec<_>>(),
        "totalPages": page.total_pages,
        "totalElements": page.total_elements,
        "hasNext": page.has_next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(size: Option<&str>, page: Option<&str>, order: Option<&str>) -> PageParams {
        PageParams {
            page_size: size.map(str::to_string),
            page: page.map(str::to_string),
            sort_order: order.map(str::to_string),
            ..PageParams::default()
        }
    }

    #[test]
    fn validates_like_thingsboard() {
        let q = params(Some("10"), Some("2"), Some("desc")).query().unwrap();
        assert_eq!(
            (q.page_size, q.page, q.sort_order),
            (10, 2, SortOrder::Desc)
        );
        for bad in [
            params(None, Some("0"), None),
            params(Some("10"), None, None),
            params(Some("x"), Some("0"), None),
            params(Some("0"), Some("0"), None),
            params(Some("10"), Some("-1"), None),
            params(Some("10"), Some("0"), Some("sideways")),
        ] {
            let err = bad.query().unwrap_err();
            assert_eq!(err.status().as_u16(), 400, "{bad:?}");
        }
    }
}
