//! The MQTT CONNECT decision, one test per row of the reference's section 1.2.

use super::*;
use crate::{CredentialsDraft, DeviceDraft};

struct Fixture {
    e: Entities,
    token_device: Uuid,
    client_only: Uuid,
    user_only: Uuid,
    pair: Uuid,
}

fn fixture() -> Fixture {
    let e = Entities::open_in_memory().unwrap();
    let t = e.create_tenant("T").unwrap().id;
    let make = |name: &str, c: CredentialsDraft| {
        e.save_device(t, &DeviceDraft::named(name), Some(&c))
            .unwrap()
            .id
    };
    let token_device = make("token", CredentialsDraft::access_token("TOKEN1"));
    let client_only = make(
        "client-only",
        CredentialsDraft::mqtt_basic(Some("cid-only"), None, None),
    );
    let user_only = make(
        "user-only",
        CredentialsDraft::mqtt_basic(None, Some("uname"), Some("upw")),
    );
    let pair = make(
        "pair",
        CredentialsDraft::mqtt_basic(Some("pc"), Some("pu"), Some("ppw")),
    );
    Fixture {
        e,
        token_device,
        client_only,
        user_only,
        pair,
    }
}

fn device_of(auth: MqttAuth) -> Uuid {
    match auth {
        MqttAuth::Device(d) => d.device_id,
        other => panic!("expected a device, got {other:?}"),
    }
}

fn refused(auth: MqttAuth) -> AuthRefusal {
    match auth {
        MqttAuth::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn provision_by_username_or_client_id() {
    let f = fixture();
    assert_eq!(
        f.e.authenticate_mqtt("x", Some("provision"), Some(b"any")),
        MqttAuth::Provision
    );
    assert_eq!(
        f.e.authenticate_mqtt("provision", None, None),
        MqttAuth::Provision
    );
}

#[test]
fn access_token_as_username_ignores_client_id_and_password() {
    let f = fixture();
    assert_eq!(
        device_of(f.e.authenticate_mqtt("random", Some("TOKEN1"), None)),
        f.token_device
    );
    assert_eq!(
        device_of(f.e.authenticate_mqtt("", Some("TOKEN1"), Some(b"whatever"))),
        f.token_device
    );
    assert_eq!(f.e.device_by_access_token("TOKEN1").unwrap().name, "token");
    assert!(
        f.e.device_by_access_token("uname").is_none(),
        "MQTT_BASIC ids are not access tokens"
    );
}

#[test]
fn client_id_only_credentials() {
    let f = fixture();
    assert_eq!(
        device_of(f.e.authenticate_mqtt("cid-only", None, None)),
        f.client_only
    );
    // An empty username is looked up as no username.
    assert_eq!(
        device_of(f.e.authenticate_mqtt("cid-only", Some(""), None)),
        f.client_only
    );
    // With a username, client-id-only credentials are not considered.
    assert_eq!(
        refused(f.e.authenticate_mqtt("cid-only", Some("someone"), None)),
        AuthRefusal::BadUserNameOrPassword
    );
}

#[test]
fn user_name_only_credentials_check_password() {
    let f = fixture();
    assert_eq!(
        device_of(f.e.authenticate_mqtt("any", Some("uname"), Some(b"upw"))),
        f.user_only
    );
    assert_eq!(
        refused(f.e.authenticate_mqtt("any", Some("uname"), Some(b"bad"))),
        AuthRefusal::BadUserNameOrPassword
    );
    assert_eq!(
        refused(f.e.authenticate_mqtt("any", Some("uname"), None)),
        AuthRefusal::BadUserNameOrPassword
    );
}

#[test]
fn client_id_and_user_name_pair() {
    let f = fixture();
    assert_eq!(
        device_of(f.e.authenticate_mqtt("pc", Some("pu"), Some(b"ppw"))),
        f.pair
    );
    assert!(matches!(
        f.e.authenticate_mqtt("other", Some("pu"), Some(b"ppw")),
        MqttAuth::Refused(_)
    ));
    assert!(matches!(
        f.e.authenticate_mqtt("pc", Some("pu"), Some(b"no")),
        MqttAuth::Refused(_)
    ));
}

#[test]
fn refusal_codes_follow_the_connack_table() {
    let f = fixture();
    // Username, password and client id all present.
    assert_eq!(
        refused(f.e.authenticate_mqtt("c", Some("u"), Some(b"p"))),
        AuthRefusal::BadUserNameOrPassword
    );
    // Exactly one of username / password (the typical unknown-token case).
    assert_eq!(
        refused(f.e.authenticate_mqtt("c", Some("nope"), None)),
        AuthRefusal::BadUserNameOrPassword
    );
    assert_eq!(
        refused(f.e.authenticate_mqtt("c", None, Some(b"p"))),
        AuthRefusal::BadUserNameOrPassword
    );
    // Neither, with a non-blank client id.
    assert_eq!(
        refused(f.e.authenticate_mqtt("unknown", None, None)),
        AuthRefusal::ClientIdNotValid
    );
    // Neither, blank client id.
    assert_eq!(
        refused(f.e.authenticate_mqtt("  ", None, None)),
        AuthRefusal::NotAuthorized
    );
    assert_eq!(
        refused(f.e.authenticate_mqtt("", None, None)),
        AuthRefusal::NotAuthorized
    );
}

#[test]
fn reason_codes() {
    assert_eq!(AuthRefusal::BadUserNameOrPassword.reason_code_v5(), 0x86);
    assert_eq!(AuthRefusal::BadUserNameOrPassword.return_code_v3(), 0x05);
    assert_eq!(AuthRefusal::ClientIdNotValid.reason_code_v5(), 0x85);
    assert_eq!(AuthRefusal::ClientIdNotValid.return_code_v3(), 0x02);
    assert_eq!(AuthRefusal::NotAuthorized.reason_code_v5(), 0x87);
    assert_eq!(AuthRefusal::NotAuthorized.return_code_v3(), 0x05);
}

#[test]
fn deleted_device_no_longer_authenticates() {
    let f = fixture();
    let tenant = f.e.device_by_id(f.pair).unwrap().unwrap().tenant_id;
    f.e.delete_device(tenant, f.pair).unwrap();
    assert!(matches!(
        f.e.authenticate_mqtt("pc", Some("pu"), Some(b"ppw")),
        MqttAuth::Refused(_)
    ));
}
