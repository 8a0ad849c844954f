package contract_test

import (
	"fmt"
	"time"

	"github.com/chronoscron/chronos/contract"
)

func ExampleDecodeBytes() {
	var req contract.CancelRequest
	for _, body := range []string{
		`{"job_id":"nightly"}`,
		`{"job_id":"a","JOB_ID":"b"}`,
		`{"jobId":"nightly"}`,
		`{"job_id":"nightly"} {}`,
	} {
		if e := contract.DecodeBytes([]byte(body), &req); e != nil {
			fmt.Println(e.HTTPStatus(), e.Code)
			continue
		}
		fmt.Println("ok", req.JobID)
	}
	// Output:
	// ok nightly
	// 400 duplicate_key
	// 400 unknown_field
	// 400 trailing_data
}

func ExampleParseTime() {
	for _, s := range []string{"2026-06-18T09:00:00+05:30", "2026-06-18T9:00:00Z", "2026-06-18T09:00:00+24:00"} {
		t, err := contract.ParseTime(s)
		if err != nil {
			fmt.Println("refused", s)
			continue
		}
		fmt.Println(contract.FormatTime(t))
	}
	// Output:
	// 2026-06-18T03:30:00Z
	// refused 2026-06-18T9:00:00Z
	// refused 2026-06-18T09:00:00+24:00
}

func ExampleVerifyWebhook() {
	key, _ := contract.ParseWebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	body := []byte(`{"test": 2432232314}`)
	sent := time.Unix(1614265330, 0)
	h := contract.WebhookHeaders([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", sent, body)
	fmt.Println(h[contract.HeaderWebhookSignature])

	err := contract.VerifyWebhook(contract.WebhookCall{ID: h[contract.HeaderWebhookID], Timestamp: h[contract.HeaderWebhookTimestamp], Signature: h[contract.HeaderWebhookSignature], Body: body},
		contract.WebhookVerifyOptions{Keys: [][]byte{key}, Now: sent.Add(time.Minute)})
	fmt.Println(err)
	err = contract.VerifyWebhook(contract.WebhookCall{ID: h[contract.HeaderWebhookID], Timestamp: h[contract.HeaderWebhookTimestamp], Signature: h[contract.HeaderWebhookSignature], Body: body},
		contract.WebhookVerifyOptions{Keys: [][]byte{key}, Now: sent.Add(10 * time.Minute)})
	fmt.Println(err)
	// Output:
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
	// <nil>
	// invalid webhook signature: timestamp outside the 5m0s tolerance
}
