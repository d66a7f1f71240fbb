package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cellstore/cellstore/engine/storage"
	s3 "github.com/cellstore/cellstore/engine/storage/s3"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
)

// BenchmarkPut: create-only PUTs of WAL-sized bodies against the local S3 server, one at a time,
// as the object log sends them, with the SDK's request options side by side: the default (the
// payload's SHA-256 in the signature over plain HTTP, and a CRC-32 checksum), an unsigned payload
// with the CRC-32, and neither. On the local MinIO a 4 KiB PUT costs 2.2-2.5 ms whichever is used
// (docs/benchmarks.md): the server's time, not the client's, so Bucket keeps the SDK's defaults.
//
//	CELLSTORE_S3_SERVER=$(hack/s3-server.sh) go test -run XXX -bench Put -benchtime 2000x ./engine/storage/s3/
func BenchmarkPut(b *testing.B) {
	srv := s3test.Start(b)
	srv.CreateBucket(b, "bench")
	bk, err := s3.Open(context.Background(), srv.Config("bench"))
	if err != nil {
		b.Fatal(err)
	}
	var run int // keys are created once: every round of a sub-benchmark writes new ones
	for _, size := range []int{4 << 10, 256 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		b.Run(fmt.Sprintf("size=%d/Bucket.Put", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			run++
			for i := 0; i < b.N; i++ {
				if _, err := bk.Put(context.Background(), fmt.Sprintf("p/%d/%d/%d", size, run, i), body, storage.Condition{IfNoneMatch: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, tc := range []struct {
			name string
			opt  func(*awss3.Options)
		}{
			{"unsigned+crc32", func(o *awss3.Options) {
				o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
			}},
			{"unsigned+nochecksum", func(o *awss3.Options) {
				o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
				o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			}},
		} {
			b.Run(fmt.Sprintf("size=%d/%s", size, tc.name), func(b *testing.B) {
				b.SetBytes(int64(size))
				run++
				for i := 0; i < b.N; i++ {
					_, err := bk.Client().PutObject(context.Background(), &awss3.PutObjectInput{Bucket: aws.String("bench"),
						Key: aws.String(fmt.Sprintf("%s/%d/%d/%d", tc.name, size, run, i)), Body: bytes.NewReader(body),
						ContentLength: aws.Int64(int64(size)), IfNoneMatch: aws.String("*")}, tc.opt)
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
