package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/cellstore/cellstore/engine/storage"
)

var _ storage.MultipartBucket = (*Bucket)(nil)

// StartUpload implements storage.MultipartBucket with S3's multipart upload. Complete is
// create-only (If-None-Match: * on CompleteMultipartUpload).
func (b *Bucket) StartUpload(ctx context.Context, key string) (storage.Upload, error) {
	if err := storage.CheckKey(key); err != nil {
		return nil, err
	}
	var id string
	err := b.call(ctx, "create-upload", key, func(ctx context.Context) error {
		out, err := b.client.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: &b.cfg.Bucket, Key: aws.String(b.key(key))})
		if err == nil {
			id = aws.ToString(out.UploadId)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &upload{b: b, key: key, id: id}, nil
}

// upload is one multipart upload; its methods are called by one goroutine at a time.
type upload struct {
	b     *Bucket
	key   string
	id    string
	parts []types.CompletedPart
	sums  []byte // the parts' MD5s, for the ETag S3 gives the whole object
	done  bool
}

func (u *upload) WritePart(ctx context.Context, part []byte) error {
	if u.done {
		return fmt.Errorf("s3: upload %s: part after Complete or Abort", u.key)
	}
	n := int32(len(u.parts) + 1)
	if n > storage.MaxParts {
		return fmt.Errorf("s3: upload %s: more than %d parts", u.key, storage.MaxParts)
	}
	var etag string
	err := u.b.call(ctx, "upload-part", u.key, func(ctx context.Context) error {
		out, err := u.b.client.UploadPart(ctx, &awss3.UploadPartInput{Bucket: &u.b.cfg.Bucket, Key: aws.String(u.b.key(u.key)),
			UploadId: &u.id, PartNumber: aws.Int32(n), Body: bytes.NewReader(part), ContentLength: aws.Int64(int64(len(part)))})
		if err == nil {
			etag = aws.ToString(out.ETag)
		}
		return err
	})
	if err != nil {
		return err
	}
	u.sums = append(u.sums, partMD5(etag, part)...)
	u.parts = append(u.parts, types.CompletedPart{ETag: aws.String(etag), PartNumber: aws.Int32(n)})
	u.b.metrics.bytesOut.Add(float64(len(part)))
	return nil
}

// partMD5 is a part's MD5: the ETag S3 answered for it when that is one (32 hex digits, as S3 and
// MinIO give a part without customer-key encryption), which spares hashing every uploaded byte a
// second time; else computed.
func partMD5(etag string, part []byte) []byte {
	if b, err := hex.DecodeString(strings.Trim(etag, `"`)); err == nil && len(b) == md5.Size {
		return b
	}
	sum := md5.Sum(part)
	return sum[:]
}

// multipartETag is the ETag S3 (and MinIO) give an object made of parts: the MD5 of the parts'
// MD5s, a dash, the number of parts.
func (u *upload) multipartETag() string {
	sum := md5.Sum(u.sums)
	return hex.EncodeToString(sum[:]) + "-" + strconv.Itoa(len(u.parts))
}

func (u *upload) Complete(ctx context.Context) (string, error) {
	if u.done {
		return "", fmt.Errorf("s3: upload %s: already completed or aborted", u.key)
	}
	if len(u.parts) == 0 {
		if err := u.WritePart(ctx, nil); err != nil { // an empty object is one empty part
			return "", err
		}
	}
	u.done = true
	var etag string
	noSuchUpload := false
	err := u.b.call(ctx, "complete-upload", u.key, func(ctx context.Context) error {
		out, err := u.b.client.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{Bucket: &u.b.cfg.Bucket,
			Key: aws.String(u.b.key(u.key)), UploadId: &u.id, IfNoneMatch: aws.String("*"),
			MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts}})
		if err == nil {
			etag = aws.ToString(out.ETag)
		}
		// (Read from the store's own answer: call's explanation keeps only what it maps to.)
		var ae smithy.APIError
		noSuchUpload = errors.As(err, &ae) && ae.ErrorCode() == "NoSuchUpload"
		return err
	})
	if err == nil {
		return etag, nil
	}
	// A retry of a Complete whose answer was lost finds the upload gone (NoSuchUpload) or the
	// key taken (its own object): the object with this upload's ETag and size is its own.
	if errors.Is(err, storage.ErrPrecondition) || noSuchUpload {
		if info, serr := u.b.Stat(ctx, u.key); serr == nil && strings.Trim(info.ETag, `"`) == u.multipartETag() {
			return info.ETag, nil
		}
	}
	_ = u.abort(ctx) // the parts would be stored (and billed) until a lifecycle rule drops them
	return "", err
}

func (u *upload) Abort(ctx context.Context) error {
	if u.done {
		return nil
	}
	u.done = true
	return u.abort(ctx)
}

func (u *upload) abort(ctx context.Context) error {
	return u.b.call(ctx, "abort-upload", u.key, func(ctx context.Context) error {
		_, err := u.b.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: &u.b.cfg.Bucket,
			Key: aws.String(u.b.key(u.key)), UploadId: &u.id})
		return err
	})
}
